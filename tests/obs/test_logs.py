"""--log-format json: each log line one JSON object whose keys are the message's key=value fields."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from replog.obs.logs import JsonFormatter, LineBudget, RepeatedWarnings
from tests.support.broker_process import BrokerProcess


def record(message: str, *args, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("replog.replication", logging.INFO, __file__, 1, message, args, exc_info)


def test_fields_become_keys_and_integers_numbers():
    line = JsonFormatter().format(record("became leader topic=%s partition=%d epoch=%d isr=%s", "clicks", 3, -1, "(1, 2)"))
    document = json.loads(line)
    assert document["event"] == "became leader" and document["logger"] == "replog.replication"
    assert (document["topic"], document["partition"], document["epoch"], document["isr"]) == ("clicks", 3, -1, "(1,")
    assert document["message"] == "became leader topic=clicks partition=3 epoch=-1 isr=(1, 2)", "the whole line kept"
    assert document["level"] == "INFO" and document["time"].endswith("+00:00")


def test_a_field_cannot_overwrite_the_objects_own_keys_and_exceptions_are_kept():
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    document = json.loads(JsonFormatter().format(record("request failed level=9 message=x peer=%s", "1.2.3.4:5", exc_info=exc_info)))
    assert (document["level"], document["peer"], document["event"]) == ("INFO", "1.2.3.4:5", "request failed")
    assert "ValueError: boom" in document["exception"]
    assert json.loads(JsonFormatter().format(record("no fields here")))["event"] == "no fields here"


@pytest.mark.cluster
def test_a_broker_logs_one_json_object_a_line(tmp_path):
    broker = BrokerProcess(tmp_path / "data", extra_args=("--log-level", "INFO", "--log-format", "json"))
    broker.start()
    try:
        # Logged before the CLI's "listening on" line, which start() waits for.
        started = [document for document in map(json.loads, (line for line in broker.output if line.startswith("{")))
                   if document["event"] == "broker started"]
    finally:
        broker.stop()
    assert started[0]["broker"] == 0 and started[0]["listeners"] == f"PLAINTEXT://127.0.0.1:{broker.port}"
    logged = [line for line in broker.output if not line.startswith("replog broker ")]  # the CLI's own lines, not logs
    assert logged and all(isinstance(json.loads(line), dict) for line in logged), logged[:5]


def test_identical_warnings_within_the_interval_are_held_back_and_counted():
    now = [0.0]
    repeats = RepeatedWarnings(interval_s=10.0, clock=lambda: now[0])

    def warning(message: str) -> logging.LogRecord:
        return logging.LogRecord("replog.replication.fetcher", logging.WARNING, __file__, 1, message, (), None)

    assert repeats.filter(warning("fetch from leader failed leader=1"))
    now[0] = 3.0
    assert not repeats.filter(warning("fetch from leader failed leader=1"))
    assert repeats.filter(warning("fetch from leader failed leader=2")), "another text is another warning"
    now[0] = 6.0
    assert not repeats.filter(warning("fetch from leader failed leader=1"))
    now[0] = 12.0
    after = warning("fetch from leader failed leader=1")
    assert repeats.filter(after) and after.getMessage() == "fetch from leader failed leader=1 repeated=2 in_last_s=12"
    assert repeats.filter(record("an info line")) and repeats.filter(record("an info line")), "INFO is never held back"


def test_a_line_budget_lets_its_lines_through_then_counts_the_rest_until_the_next_interval(caplog):
    now_s = [0.0]
    budget = LineBudget(logging.getLogger("budgeted"), "closing connection", lines_max=3, interval_s=10,
                        clock=lambda: now_s[0])
    with caplog.at_level(logging.WARNING, logger="budgeted"):
        assert [budget.allows() for _ in range(5)] == [True, True, True, False, False]
        assert caplog.records == []  # the lines themselves are the caller's
        now_s[0] += 10
        assert budget.allows()
    assert [record.getMessage() for record in caplog.records] == [
        "closing connection lines not logged held_back=2 interval_s=10"]
