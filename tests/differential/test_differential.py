"""The same scenarios against replog and against Apache Kafka: their results must be equal, but
for the differences listed in differences.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from .comparison import differing, outlived, unexplained
from .differences import INTENDED
from .scenarios import SCENARIOS

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_replog_answers_as_kafka(name, kafka, replog):
    # At once against both: a scenario mostly waits (for a group's first rebalance, 3 s in each).
    with ThreadPoolExecutor(max_workers=2) as both:
        differences = differing(*both.map(SCENARIOS[name], (kafka, replog)))
    listed = INTENDED.get(name, {})
    left = unexplained(differences, listed)
    assert not left, f"{name}: replog differs from Kafka (path: kafka's != replog's):\n" + "\n".join(
        f"  {path}: {kafka_answer!r} != {replog_answer!r}" for path, (kafka_answer, replog_answer) in left.items())
    assert not outlived(differences, listed), f"{name}: listed in differences.py but no longer different: {outlived(differences, listed)}"


def test_every_listed_difference_names_a_scenario():
    assert set(INTENDED) <= set(SCENARIOS)
