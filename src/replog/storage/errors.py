"""Errors raised by a partition's storage, each carrying the Kafka error code it answers with.

The broker maps an exception to a response by `error_code` alone, so every failure a client can
cause or observe on the log path has exactly one class here.
"""

import errno
from typing import ClassVar, NamedTuple

from kio.schema.errors import ErrorCode

# The records of one batch listed in a refusal of records one by one (RejectedRecords); the rest
# are counted only. Kafka lists every one; this bounds the memory and the answer a batch of
# hundreds of thousands of small records can cost. librdkafka fails a record left unlisted with
# _INVALID_DIFFERENT_RECORD rather than INVALID_RECORD.
RECORD_ERRORS_MAX = 1000


class RejectedRecords(NamedTuple):
    """The records of a well-formed batch refused one by one, as Kafka's LogValidator collects its
    record errors (RecordValidationException): every record is read, and each without a key on a
    compacted topic, or else with a CreateTime timestamp outside [timestamp_low, timestamp_high],
    is rejected. The whole batch is refused."""

    total: int  # how many were rejected
    indexes: tuple[int, ...]  # the first RECORD_ERRORS_MAX of them, by their index in the batch
    timestamps: tuple[int | None, ...]  # each one's timestamp if that was out of bounds; None: it has no key
    base_offset: int  # the batch's, as the producer sent it
    timestamp_low: int
    timestamp_high: int

    def record_errors(self, topic_partition: str) -> tuple[tuple[int, str], ...]:
        """Produce's record_errors (batch_index, batch_index_error_message), in Kafka's words."""
        return tuple((index, _no_key_message(topic_partition) if timestamp is None else
                      f"Timestamp {timestamp} of message with offset {self.base_offset + index} is out of range. "
                      f"The timestamp should be within [{self.timestamp_low}, {self.timestamp_high}]")
                     for index, timestamp in zip(self.indexes, self.timestamps))

    def error_message(self, topic_partition: str, invalid_timestamp: bool) -> str:
        """Produce's error_message, in Kafka's words; `invalid_timestamp`: whether any record was
        rejected for its timestamp (listed or not), which makes the error INVALID_TIMESTAMP."""
        if invalid_timestamp:
            return "One or more records have been rejected due to invalid timestamp"
        first = ", ".join(f"RecordError(batchIndex={index}, message='{message}')"
                          for index, message in self.record_errors(topic_partition)[:3])
        return (f"One or more records have been rejected due to {self.total} record errors in total, and only "
                f"showing the first three errors at most: [{first}]")


def _no_key_message(topic_partition: str) -> str:
    return f"Compacted topic cannot accept message without key in topic partition {topic_partition}"


class ReplicaError(Exception):
    """Base class: a failure with a Kafka protocol error code.

    `record_index`: the record of the batch the failure is about, where it is about one (Produce's
    record_errors name it as batch_index, as Kafka's LogValidator does); `rejected`: the records
    refused one by one, where the failure is their refusal."""

    error_code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error

    def __init__(self, message: str = "", record_index: int | None = None, rejected: RejectedRecords | None = None):
        super().__init__(message)
        self.record_index = record_index
        self.rejected = rejected

    def produce_answer(self, topic_partition: str) -> tuple[str, tuple[tuple[int, str], ...]]:
        """(error_message, record_errors) of Produce's answer refusing a batch of `topic_partition`
        for this failure."""
        if self.rejected is not None:
            return (self.rejected.error_message(topic_partition, isinstance(self, InvalidTimestampError)),
                    self.rejected.record_errors(topic_partition))
        return str(self), () if self.record_index is None else ((self.record_index, str(self)),)


class OffsetOutOfRangeError(ReplicaError):
    """The requested offset is below the log start offset or above the log end offset."""

    error_code = ErrorCode.offset_out_of_range


class CorruptRecordError(ReplicaError):
    """Bytes that are not a whole, intact record batch: bad length, torn tail, CRC mismatch."""

    error_code = ErrorCode.corrupt_message


class RecordTooLargeError(ReplicaError):
    """One batch is larger than max.message.bytes."""

    error_code = ErrorCode.message_too_large


class InvalidTimestampError(ReplicaError):
    """A record's timestamp lies outside message.timestamp.before.max.ms / after.max.ms of now, or
    a producer claimed LogAppendTime."""

    error_code = ErrorCode.invalid_timestamp


class InvalidTxnStateError(ReplicaError):
    """A batch that does not fit its producer's transaction here: a plain batch while its
    transaction is open, or a transactional one whose transaction was not verified (KIP-890)."""

    error_code = ErrorCode.invalid_txn_state


class RecordListTooLargeError(ReplicaError):
    """One append is larger than a whole segment (segment.bytes), so it could never be stored."""

    error_code = ErrorCode.record_list_too_large


class InvalidRecordError(ReplicaError):
    """A well-formed batch the broker refuses.

    Also used for message format v0/v1 (magic 0 or 1): Kafka 4 rejects those in
    ProduceRequest.validateRecords with InvalidRecordException, which answers INVALID_RECORD (87),
    not UNSUPPORTED_FOR_MESSAGE_FORMAT (43); we answer as Kafka 4 does.
    """

    error_code = ErrorCode.invalid_record


class KafkaStorageError(ReplicaError):
    """The log directory does not take the write: it failed (ENOSPC, EDQUOT, EIO, a short
    write: `reason` names it) and was taken back, or free space is below
    log.dir.min.free.bytes (disk_space.py). Kafka answers this for a failed log directory;
    librdkafka, the Java client, aiokafka and kafka-python all retry it after a metadata refresh."""

    error_code = ErrorCode.kafka_storage_error

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
