"""Log lines for people and for log shippers: `--log-format text|json`.

replog's log messages are an event followed by key=value fields ("became leader topic=clicks
partition=3 epoch=7 broker=1"). The text format prints them as they are; the JSON format prints
one object a line with the same content, the fields as keys (integers as numbers), so that a
shipper can index topic, partition, broker and epoch without parsing the text.
"""

from __future__ import annotations

import datetime
import json
import logging
import re

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# A field: a name, "=", and a value running to the next space. Values with spaces (an error's
# text) keep their first word as the field and the whole line in "message".
_FIELD = re.compile(r"(?:^|\s)([A-Za-z_][\w.]*)=(\S*)")
# Keys of the object itself, which a field of the same name must not overwrite.
_RESERVED = frozenset({"time", "level", "logger", "event", "message", "exception"})


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


def use_log_format(log_format: str) -> None:
    """Format every handler of the root logger (the one basicConfig made) as asked."""
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
