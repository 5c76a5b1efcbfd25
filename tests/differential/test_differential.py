"""The same scenarios against replog and against Apache Kafka: their results must be equal, but
for the differences listed in differences.py."""

from __future__ import annotations

from typing import Any

import pytest

from .differences import AWAITING_FIX, INTENDED
from .scenarios import SCENARIOS

pytestmark = pytest.mark.kafka
SEPARATOR = "/"
WILDCARD = "*"


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


def _under(path: str, listed: str) -> bool:
    """Whether `path` is the listed part or inside it; `*` in a listing stands for any one key."""
    if listed == "":
        return True
    steps, listed_steps = path.split(SEPARATOR), listed.split(SEPARATOR)
    return len(steps) >= len(listed_steps) and all(want in (WILDCARD, step) for step, want in zip(steps, listed_steps))


def differing(kafka: dict[str, Any], replog: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    missing = "<absent>"
    return {path: (kafka.get(path, missing), replog.get(path, missing))
            for path in sorted(kafka.keys() | replog.keys()) if kafka.get(path, missing) != replog.get(path, missing)}


def _marks(name: str) -> list:
    if name in AWAITING_FIX:
        return [pytest.mark.xfail(strict=True, reason=f"awaiting fix: {AWAITING_FIX[name]}")]
    return []


@pytest.mark.parametrize("name", [pytest.param(name, id=name, marks=_marks(name)) for name in SCENARIOS])
def test_replog_answers_as_kafka(name, kafka, replog):
    differences = differing(flattened(SCENARIOS[name](kafka)), flattened(SCENARIOS[name](replog)))
    intended = INTENDED.get(name, {})
    unexplained = {path: answers for path, answers in differences.items()
                   if not any(_under(path, listed) for listed in intended)}
    assert not unexplained, f"{name}: replog differs from Kafka (path: (kafka, replog)):\n" + "\n".join(
        f"  {path}: {kafka_answer!r} != {replog_answer!r}" for path, (kafka_answer, replog_answer) in unexplained.items())
    gone = [listed for listed in intended if not any(_under(path, listed) for path in differences)]
    assert not gone, f"{name}: listed as differing in differences.py but now the same: {gone}"
