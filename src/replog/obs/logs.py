"""Log lines for people and for log shippers: `--log-format text|json`, and identical warnings
held back while they repeat.

replog's log messages are an event followed by key=value fields ("became leader topic=clicks
partition=3 epoch=7 broker=1"). The text format prints them as they are; the JSON format prints
one object a line with the same content, the fields as keys (integers as numbers), so that a
shipper can index topic, partition, broker and epoch without parsing the text.
"""

from __future__ import annotations

import collections
import datetime
import json
import logging
import re
import time
from collections.abc import Callable

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# A field: a name, "=", and a value running to the next space. Values with spaces (an error's
# text) keep their first word as the field and the whole line in "message".
_FIELD = re.compile(r"(?:^|\s)([A-Za-z_][\w.]*)=(\S*)")
# Keys of the object itself, which a field of the same name must not overwrite.
_RESERVED = frozenset({"time", "level", "logger", "event", "message", "exception"})
REPEAT_INTERVAL_S = 10.0
REPEATS_REMEMBERED_MAX = 1024


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        first_field = _FIELD.search(message)
        document = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "event": (message[:first_field.start()] if first_field else message).strip(),
            "message": message,
        }
        for name, value in _FIELD.findall(message):
            if name not in _RESERVED:
                document[name] = int(value) if re.fullmatch(r"-?\d+", value) else value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, ensure_ascii=False)


class RepeatedWarnings(logging.Filter):
    """An identical warning (same logger, level and text) within `interval_s` of the last one
    that went out is held back and counted; the next one after the interval says how many were,
    so that a broker retrying a dead peer writes a line every interval, not one per attempt."""

    def __init__(self, interval_s: float = REPEAT_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self._interval_s = interval_s
        self._clock = clock
        # (logger, level, text) -> [when it last went out, how many were held back since]
        self._seen: collections.OrderedDict[tuple[str, int, str], list] = collections.OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        key = (record.name, record.levelno, message)
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self._interval_s:
            seen[1] += 1
            return False
        if seen is not None and seen[1]:
            record.msg, record.args = f"{message} repeated={seen[1]} in_last_s={now - seen[0]:.0f}", ()
        self._seen[key] = [now, 0]
        self._seen.move_to_end(key)
        while len(self._seen) > REPEATS_REMEMBERED_MAX:
            self._seen.popitem(last=False)
        return True


class LineBudget:
    """At most `lines_max` lines of one kind an interval, each different (a peer, a subject), which
    RepeatedWarnings cannot hold back: a hostile client makes one per connection or per item of a
    request. Past the budget lines are counted, and the first line of a later interval that goes
    out is preceded by one saying how many were held back."""

    def __init__(self, logger: logging.Logger, kind: str, lines_max: int, interval_s: float = REPEAT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic):
        self._logger, self._kind = logger, kind
        self._lines_max, self._interval_s, self._clock = lines_max, interval_s, clock
        self._interval_start_s = -interval_s
        self._lines = self._held_back = 0

    def allows(self) -> bool:
        """Whether a line of this kind may go out now; counts it either way."""
        now_s = self._clock()
        if now_s - self._interval_start_s >= self._interval_s:
            if self._held_back:
                self._logger.warning("%s lines not logged held_back=%d interval_s=%d", self._kind, self._held_back,
                                     self._interval_s)
            self._interval_start_s, self._lines, self._held_back = now_s, 0, 0
        if self._lines >= self._lines_max:
            self._held_back += 1
            return False
        self._lines += 1
        return True


class OncePerInterval:
    """Whether a line about `key` may go out now: once per key per interval, the keys remembered
    bounded (the oldest forgotten first), and the lines of an interval across keys within a
    LineBudget, for lines each naming a subject a client chooses (a topic, a group)."""

    def __init__(self, logger: logging.Logger, kind: str, keys_max: int, lines_max: int,
                 interval_s: float = REPEAT_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self._keys_max, self._interval_s, self._clock = keys_max, interval_s, clock
        self._last_logged: collections.OrderedDict[tuple, float] = collections.OrderedDict()
        self._budget = LineBudget(logger, kind, lines_max, interval_s, clock)

    def allows(self, key: tuple) -> bool:
        now_s = self._clock()
        last = self._last_logged.get(key)
        if last is not None and now_s - last < self._interval_s:
            return False
        if not self._budget.allows():
            return False
        self._last_logged[key] = now_s
        self._last_logged.move_to_end(key)
        while len(self._last_logged) > self._keys_max:
            self._last_logged.popitem(last=False)
        return True


def configure_logging(log_format: str) -> None:
    """Every handler of the root logger (the one basicConfig made): formatted as asked, and
    holding back repeated warnings."""
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    repeats = RepeatedWarnings()
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
        handler.addFilter(repeats)
