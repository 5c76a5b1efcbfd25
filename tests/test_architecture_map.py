"""The README's architecture map names every package under src/replog/, so that a newcomer finds
each in it and a new package cannot land without saying what it owns."""

from __future__ import annotations

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SOURCE_ROOT = REPO / "src" / "replog"
README = REPO / "README.md"
ROOT_LINE = "src/replog/"
INDENT_STEP = 2
# Where the descriptions start: a line indented this far or more continues the one above.
DESCRIPTION_COLUMN = 20
# An entry: names ending in "/" (packages) or a file suffix, then two spaces or the line's end.
_ENTRY = re.compile(r"^( *)([A-Za-z_][\w./]*(?:, [A-Za-z_][\w./]*)*)(?: {2,}|$)")


def architecture_map(readme: str) -> str:
    """The first code block of the README's Architecture section."""
    section = readme.split("\n## Architecture\n", 1)[1]
    return section.split("```\n", 2)[1]


def mapped_packages(block: str) -> set[str]:
    """The package paths the map names under src/replog/, as "net/handlers": nesting is read from
    the indentation, two spaces a level."""
    lines = block.splitlines()
    start = lines.index(ROOT_LINE)
    packages: set[str] = set()
    parents: list[str] = []
    for line in lines[start + 1:]:
        match = _ENTRY.match(line)
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip() or indent >= DESCRIPTION_COLUMN:
            continue
        if indent == 0:
            break  # past src/replog/: docs/, tests/, bench/ ...
        if match is None or indent % INDENT_STEP:
            continue
        depth = indent // INDENT_STEP - 1
        names = [name.strip() for name in match.group(2).split(",")]
        del parents[depth:]
        for name in names:
            if name.endswith("/"):
                packages.add("/".join([*parents, name.rstrip("/")]))
        if len(names) == 1 and names[0].endswith("/"):
            parents.append(names[0].rstrip("/"))
    return packages


def source_packages(root: pathlib.Path) -> set[str]:
    """Every directory under `root` holding an __init__.py, relative to it."""
    return {init.parent.relative_to(root).as_posix() for init in root.rglob("__init__.py")
            if init.parent != root and "__pycache__" not in init.parts}


def test_every_package_is_in_the_architecture_map():
    missing = source_packages(SOURCE_ROOT) - mapped_packages(architecture_map(README.read_text()))
    assert not missing, f"packages missing from the README's architecture map: {sorted(missing)}"


def test_map_reads_nesting_from_indentation():
    block = ("src/replog/\n"
             "  net/                  the wire protocol\n"
             "    handlers/           one module per API family\n"
             "                        continued/ description, not an entry\n"
             "    client.py           a module\n"
             "  storage/              bytes on disk\n"
             "  cli/                  the command\n"
             "tests/                  mirrors src/\n")
    assert mapped_packages(block) == {"net", "net/handlers", "storage", "cli"}


@pytest.mark.parametrize("left_out", ["  obs/                  observability\n",
                                      "    handlers/           one module per API family\n"])
def test_a_package_left_out_of_the_map_is_reported(tmp_path, left_out):
    (tmp_path / "net" / "handlers").mkdir(parents=True)
    (tmp_path / "obs").mkdir()
    for package in ("", "net", "net/handlers", "obs"):
        (tmp_path / package / "__init__.py").touch()
    block = ("src/replog/\n"
             "  net/                  the wire protocol\n"
             "    handlers/           one module per API family\n"
             "  obs/                  observability\n")
    assert source_packages(tmp_path) - mapped_packages(block) == set()
    assert source_packages(tmp_path) - mapped_packages(block.replace(left_out, "")) != set()
