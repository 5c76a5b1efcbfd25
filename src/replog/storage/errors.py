"""Errors raised by a partition's storage, each carrying the Kafka error code it answers with.

The broker maps an exception to a response by `error_code` alone, so every failure a client can
cause or observe on the log path has exactly one class here.
"""

import errno
from typing import ClassVar


class ReplicaError(Exception):
    """Base class: a failure with a Kafka protocol error code.

    `record_index`: the record of the batch the failure is about, where it is about one (Produce's
    record_errors name it as batch_index, as Kafka's LogValidator does)."""

    error_code: ClassVar[int] = -1  # UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", record_index: int | None = None):
        super().__init__(message)
        self.record_index = record_index


class OffsetOutOfRangeError(ReplicaError):
    """The requested offset is below the log start offset or above the log end offset."""

    error_code = 1  # OFFSET_OUT_OF_RANGE


class CorruptRecordError(ReplicaError):
    """Bytes that are not a whole, intact record batch: bad length, torn tail, CRC mismatch."""

    error_code = 2  # CORRUPT_MESSAGE


class RecordTooLargeError(ReplicaError):
    """One batch is larger than max.message.bytes."""

    error_code = 10  # MESSAGE_TOO_LARGE


class InvalidTimestampError(ReplicaError):
    """A record's timestamp lies outside message.timestamp.before.max.ms / after.max.ms of now, or
    a producer claimed LogAppendTime."""

    error_code = 32  # INVALID_TIMESTAMP


class InvalidTxnStateError(ReplicaError):
    """A transactional batch: there is no transaction coordinator to have begun its transaction,
    which is what Kafka answers a partition no transaction was verified for (KIP-890)."""

    error_code = 48  # INVALID_TXN_STATE


class RecordListTooLargeError(ReplicaError):
    """One append is larger than a whole segment (segment.bytes), so it could never be stored."""

    error_code = 18  # RECORD_LIST_TOO_LARGE


class InvalidRecordError(ReplicaError):
    """A well-formed batch the broker refuses.

    Also used for message format v0/v1 (magic 0 or 1): Kafka 4 rejects those in
    ProduceRequest.validateRecords with InvalidRecordException, which answers INVALID_RECORD (87),
    not UNSUPPORTED_FOR_MESSAGE_FORMAT (43); we answer as Kafka 4 does.
    """

    error_code = 87  # INVALID_RECORD


class KafkaStorageError(ReplicaError):
    """The log directory does not take the write: it failed (ENOSPC, EDQUOT, EIO, a short
    write: `reason` names it) and was taken back, or free space is below
    log.dir.min.free.bytes (disk_space.py). Kafka answers this for a failed log directory;
    librdkafka, the Java client, aiokafka and kafka-python all retry it after a metadata refresh."""

    error_code = 56  # KAFKA_STORAGE_ERROR

    def __init__(self, message: str, reason: str, appended: tuple[int, int] | None = None):
        super().__init__(message)
        self.reason = reason
        # (first, last) offset of records the failed call did write: the flush after them failed.
        self.appended = appended

    @classmethod
    def of(cls, error: OSError, directory, appended: tuple[int, int] | None = None) -> "KafkaStorageError":
        return cls(f"writing to {directory} failed: {error}", os_error_name(error), appended)


def os_error_name(error: OSError) -> str:
    """The errno's name ("ENOSPC"), the same for every file: what a line about a failed write
    names, so that the lines of many partitions failing alike are identical."""
    return errno.errorcode.get(error.errno or -1, type(error).__name__)
