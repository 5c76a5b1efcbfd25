"""log_refusal's bounds: one line per kind, subject and interval, and at most an interval's budget
of lines across subjects, the rest counted in one line of the next interval."""

from __future__ import annotations

import logging

from replog.net.codec import ApiKey, Request
from replog.net.handlers import REFUSAL_LINES_PER_INTERVAL_MAX, REFUSAL_LOG_INTERVAL_S, RefusalLog

REQUEST = Request(ApiKey.PRODUCE, 9, 1, "client", None)


def test_an_interval_logs_its_budget_of_lines_then_says_how_many_it_held_back(caplog):
    now_s = [0.0]
    refusals = RefusalLog(clock=lambda: now_s[0])
    with caplog.at_level(logging.WARNING, logger="replog.net.handlers"):
        for partition in range(REFUSAL_LINES_PER_INTERVAL_MAX + 50):
            refusals.log(REQUEST, "produce to a partition not led here", f"topic-{partition}", 3)
        assert len(caplog.records) == REFUSAL_LINES_PER_INTERVAL_MAX
        now_s[0] += REFUSAL_LOG_INTERVAL_S
        refusals.log(REQUEST, "produce to a partition not led here", "topic-next", 3)
    held_back, next_line = caplog.records[-2:]
    assert "held_back=50" in held_back.getMessage()
    assert "subject=topic-next" in next_line.getMessage()


def test_a_subject_is_logged_once_an_interval_however_often_refused(caplog):
    now_s = [0.0]
    refusals = RefusalLog(clock=lambda: now_s[0])
    with caplog.at_level(logging.WARNING, logger="replog.net.handlers"):
        for _ in range(10):
            refusals.log(REQUEST, "produce to a partition not led here", "topic-0", 3)
        now_s[0] += REFUSAL_LOG_INTERVAL_S
        refusals.log(REQUEST, "produce to a partition not led here", "topic-0", 3)
    assert [record.getMessage().count("subject=topic-0") for record in caplog.records] == [1, 1]


def test_a_refusal_names_who_sent_the_request(caplog):
    request = Request(ApiKey.PRODUCE, 9, 1, "client", None, principal="User:alice")
    with caplog.at_level(logging.WARNING, logger="replog.net.handlers"):
        RefusalLog().log(request, "produce to a partition not led here", "topic-0", 3)
    [line] = [record.getMessage() for record in caplog.records]
    assert "principal=User:alice" in line and "client=client" in line
