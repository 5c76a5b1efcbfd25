"""`partition.metadata` in a log directory: the id of the topic the log belongs to, as Kafka
writes it (KIP-516), so that a log left by an earlier topic of the same name is told from the
current topic's (replica/manager.py deletes it before opening).

    version: 0
    topic_id: <the topic's id>

Written once, when a replica of a topic with an id is first loaded; a log made before topics had
ids has none, and is taken as the current topic's, as before. The tag is made durable by the
log's next flush, not when written (Log.tag_topic_id), so a crash may leave it torn: a tag that
does not end its last line reads as none, and the log is tagged again at its next load.
"""

from __future__ import annotations

import os
from pathlib import Path

from replog.storage.checkpoint import fsync_if_present, read_file

PARTITION_METADATA_FILE = "partition.metadata"
_TOPIC_ID_KEY = "topic_id: "


def tagged_topic_id(directory: Path) -> str | None:
    """The topic id the log in `directory` was tagged with; None if untagged, unreadable or
    torn (a torn id must not pass for another topic's, whose log is deleted on sight)."""
    try:
        text = read_file(os.path.join(directory, PARTITION_METADATA_FILE)).decode()
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None
    if not text.endswith("\n"):
        return None
    return next((line[len(_TOPIC_ID_KEY):].strip() for line in text.splitlines() if line.startswith(_TOPIC_ID_KEY)), None)


def tag_topic_id(directory: Path, topic_id: str) -> None:
    """Tag the untagged log in `directory` with `topic_id`, not durably: see sync_tag."""
    fd = os.open(directory / PARTITION_METADATA_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"version: 0\n{_TOPIC_ID_KEY}{topic_id}\n".encode())
    finally:
        os.close(fd)


def sync_tag(directory: Path) -> None:
    """fsync the tag's contents; its name is durable once the caller syncs the directory."""
    fsync_if_present(directory / PARTITION_METADATA_FILE)
