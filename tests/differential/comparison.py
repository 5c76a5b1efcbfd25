"""How two scenario results are compared: flattened to paths of keys, the parts differences.py
lists left out, and the listed parts that no longer differ named."""

from __future__ import annotations

from typing import Any

SEPARATOR = "/"
WILDCARD = "*"
ABSENT = "<absent>"


def flattened(result: Any, path: str = "") -> dict[str, Any]:
    """path -> leaf value of a nested result; lists of scalars stay whole (one leaf)."""
    if isinstance(result, dict) and result:
        items = result.items()
    elif isinstance(result, (list, tuple)) and any(isinstance(item, (dict, list, tuple)) for item in result):
        items = enumerate(result)
    else:
        return {path: result}
    leaves: dict[str, Any] = {}
    for key, value in items:
        leaves |= flattened(value, f"{path}{SEPARATOR}{key}" if path else str(key))
    return leaves


def under(path: str, listed: str) -> bool:
    """Whether `path` is the listed part or inside it; `*` in a listing stands for any one key."""
    if listed == "":
        return True
    steps, listed_steps = path.split(SEPARATOR), listed.split(SEPARATOR)
    return len(steps) >= len(listed_steps) and all(want in (WILDCARD, step) for step, want in zip(steps, listed_steps))


def differing(kafka: Any, replog: Any) -> dict[str, tuple[Any, Any]]:
    """path -> (Kafka's, replog's) of every leaf where the two results differ."""
    kafka, replog = flattened(kafka), flattened(replog)
    return {path: (kafka.get(path, ABSENT), replog.get(path, ABSENT))
            for path in sorted(kafka.keys() | replog.keys()) if kafka.get(path, ABSENT) != replog.get(path, ABSENT)}


def unexplained(differences: dict[str, tuple[Any, Any]], listed: dict[str, str]) -> dict[str, tuple[Any, Any]]:
    return {path: answers for path, answers in differences.items() if not any(under(path, part) for part in listed)}


def outlived(differences: dict[str, tuple[Any, Any]], listed: dict[str, str]) -> list[str]:
    """The listed parts under which nothing differs any more."""
    return [part for part in listed if not any(under(path, part) for path in differences)]
