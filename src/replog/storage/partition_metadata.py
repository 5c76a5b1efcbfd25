"""`partition.metadata` in a log directory: the id of the topic the log belongs to, as Kafka
writes it (KIP-516), so that a log left by an earlier topic of the same name is told from the
current topic's (replica/manager.py deletes it before opening).

    version: 0
    topic_id: <the topic's id>

Written once, when a replica of a topic with an id is first loaded; a log made before topics had
ids has none, and is taken as the current topic's, as before.
"""

from __future__ import annotations

import os
from pathlib import Path

from replog.storage.checkpoint import TMP_SUFFIX

PARTITION_METADATA_FILE = "partition.metadata"
_TOPIC_ID_KEY = "topic_id: "


def tagged_topic_id(directory: Path) -> str | None:
    """The topic id the log in `directory` was tagged with; None if untagged (or unreadable)."""
    try:
        lines = (directory / PARTITION_METADATA_FILE).read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None
    return next((line[len(_TOPIC_ID_KEY):].strip() for line in lines if line.startswith(_TOPIC_ID_KEY)), None)


def tag_topic_id(directory: Path, topic_id: str) -> None:
    """Tag the log in `directory` with `topic_id`: a temp file, fsynced, renamed over the tag.
    The new name is durable once the caller syncs the directory (Log.tag_topic_id)."""
    path = directory / PARTITION_METADATA_FILE
    temporary = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"version: 0\n{_TOPIC_ID_KEY}{topic_id}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
