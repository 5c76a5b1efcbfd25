"""What a partition's requests carry and what it answers (replica/partition.py): the sentinel
values of Kafka's requests, which life of a follower a fetch comes from, and the results of an
append, a read, an offset lookup and a KIP-101 truncation round, each with a Kafka error code,
and what DescribeProducers shows of a producer."""

import enum
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from replog.storage.segment import FileSlice

NO_LEADER_EPOCH = -1  # a request that does not say which leader epoch it expects
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3  # ListOffsets v7+ (KIP-734): the record with the largest timestamp
EARLIEST_LOCAL_TIMESTAMP = -4  # v8+ (KIP-405): the local log's start; without tiered storage, the log start
UNKNOWN_OFFSET = -1
NO_TIMESTAMP = -1
# Fetch's and ListOffsets' isolation_level: READ_COMMITTED reads below the last stable offset.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class FetchFrom(enum.Enum):
    """Which life of a follower's broker a fetch comes from, as its leader can tell
    (net/leader_connections.fetch_from). A fetch sent by an earlier life may reach the leader
    after the broker restarted (a paused leader's socket, a fetch it had parked), and if that
    life's machine lost unflushed writes, the records it claims are gone (KIP-903)."""

    REGISTERED = "registered"  # the life registered now
    EARLIER = "earlier"  # a life registered before it
    # A life not seen registered: a restarted broker fetches before it registers, or a client
    # posing as it. Read as a consumer reads (up to the HW), and nothing of it recorded.
    UNSEEN = "unseen"


class AppendResult(NamedTuple):
    error_code: ErrorCode
    base_offset: int
    log_append_time_ms: int  # the time the batch took on a LogAppendTime topic; -1 otherwise
    log_start_offset: int
    # Records this append added to the log (0 for a refusal or a duplicate), whatever acks=-1's
    # outcome: the offsets it assigned, which are the batch headers' record counts.
    record_count: int = 0
    # Why a batch was refused, and the records it is about (Produce's error_message and
    # record_errors as (batch_index, message), as Kafka's LogValidator gives them).
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()


class AbortedTransaction(NamedTuple):
    """An aborted transaction a read_committed fetch answers (Fetch's AbortedTransaction): the
    consumer drops this producer's records from `first_offset` up to its abort marker."""

    producer_id: int
    first_offset: int


class FetchResult(NamedTuple):
    error_code: ErrorCode
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int  # the leader's LSO: below it no transaction is open
    slices: list[FileSlice]  # zero-copy views of the log files, valid until the next truncation
    # read_committed: the aborted transactions overlapping the fetched range, oldest first;
    # None for read_uncommitted and followers.
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None


class ListOffsetsResult(NamedTuple):
    error_code: ErrorCode
    timestamp: int
    offset: int
    leader_epoch: int


class ProducerStateView(NamedTuple):
    """A producer of a partition as DescribeProducers shows it (KIP-664)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no transaction open here


class EpochEndOffset(NamedTuple):
    error_code: ErrorCode
    leader_epoch: int
    end_offset: int


class TruncationResult(NamedTuple):
    """One round of the KIP-101 handshake: where the log now ends (cuts are whole batches), and
    whether the follower must ask the leader again (with `next_epoch`, its latest epoch now)."""

    truncated_to: int
    complete: bool
    next_epoch: int
