"""What a client holding another producer's id can and cannot do, through the leader's append
path (Partition.append_as_leader), as Kafka's ProducerStateManager allows it.

Any consumer reads a producer's id, epoch and sequences in the batch headers. Kafka answers a
batch claiming them by the producer's state alone, and replog as Kafka does: an older epoch is
fenced (INVALID_PRODUCER_EPOCH), a sequence out of order refused (OUT_OF_ORDER_SEQUENCE_NUMBER),
a replay of a kept batch acknowledged where it went and not appended again; a later epoch from
sequence 0, or the next sequence, is taken (idempotence is not authentication: Kafka's answer to
that is its ACLs), and fences or puts the producer out of order.
"""

from __future__ import annotations

import pytest

from kio.schema.errors import ErrorCode

from replog.replica.partition import Partition, PartitionConfig
from replog.storage.log import Log, LogConfig
from tests.support.producer_batches import readable_producer_batch as batch
from tests.support.log_fixtures import ManualClock

LEADER = 1
VICTIM, EPOCH = 4000, 3
INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER = 47, 45


@pytest.fixture
def leader(tmp_path):
    partition = Partition(Log(tmp_path / "orders-0", LogConfig(), ManualClock()), LEADER, 0, (LEADER,), (LEADER,), 0,
                          PartitionConfig(), now_ms=0)
    yield partition
    partition.close()


async def append(partition: Partition, records: bytearray) -> tuple[int, int]:
    result = await partition.append_as_leader(records, acks=1, timeout_ms=1000)
    return result.error_code, result.base_offset


async def test_a_batch_claiming_a_producers_id_cannot_fence_it_back_skip_its_sequence_or_replace_its_records(leader):
    assert await append(leader, batch(VICTIM, EPOCH, 0, 5, b"victim")) == (ErrorCode.none, 0)
    assert await append(leader, batch(VICTIM, EPOCH, 5, 5, b"victim")) == (ErrorCode.none, 5)

    refused = [
        await append(leader, batch(VICTIM, EPOCH - 1, 10, 1, b"impostor")),  # an older epoch
        await append(leader, batch(VICTIM, -1, 10, 1, b"impostor")),  # no epoch at all
        await append(leader, batch(VICTIM, EPOCH, 12, 1, b"impostor")),  # past a gap
        await append(leader, batch(VICTIM, EPOCH, 7, 1, b"impostor")),  # inside what it wrote
        await append(leader, batch(VICTIM, EPOCH + 1, 3, 1, b"impostor")),  # a new epoch not from 0
    ]
    assert [error for error, _ in refused] == [INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER,
                                               OUT_OF_ORDER_SEQUENCE_NUMBER, OUT_OF_ORDER_SEQUENCE_NUMBER]
    # A replay of a kept batch's sequences: acknowledged where the producer's went, not appended.
    assert await append(leader, batch(VICTIM, EPOCH, 0, 5, b"impostor")) == (ErrorCode.none, 0)
    assert leader.log_end_offset == 10, "an impostor's batch was appended"

    assert await append(leader, batch(VICTIM, EPOCH, 10, 2, b"victim")) == (ErrorCode.none, 10), \
        "the producer's own next batch was refused after the impostor's"


async def test_an_epoch_below_none_is_fenced_for_a_producer_never_seen(leader):
    """As Kafka's ProducerAppendInfo, which compares with the epoch of a producer it has no
    entry for, -1: -2 is older."""
    assert (await append(leader, batch(VICTIM, -2, 0, 1, b"impostor")))[0] == INVALID_PRODUCER_EPOCH
    assert leader.log_end_offset == 0
    assert VICTIM not in leader.producer_state.producers


async def test_what_kafka_takes_from_any_client_naming_a_producer_is_taken(leader):
    """The next sequence, and a later epoch from sequence 0 (an idempotent producer bumps its
    own epoch, KIP-360): the producer itself is then out of order, or fenced."""
    assert await append(leader, batch(VICTIM, EPOCH, 0, 5, b"victim")) == (ErrorCode.none, 0)
    assert await append(leader, batch(VICTIM, EPOCH, 5, 1, b"impostor")) == (ErrorCode.none, 5)
    assert (await append(leader, batch(VICTIM, EPOCH, 5, 2, b"victim")))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert await append(leader, batch(VICTIM, EPOCH + 1, 0, 1, b"impostor")) == (ErrorCode.none, 6)
    assert (await append(leader, batch(VICTIM, EPOCH, 6, 1, b"victim")))[0] == INVALID_PRODUCER_EPOCH
