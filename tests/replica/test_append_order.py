"""A leader's appends land in the order they arrived, though a compressed batch's records are
checked in another thread first (storage/compressed_checks.py) while later appends arrive; and an
uncompressed append with nothing ahead of it never leaves the event loop's current step."""

import asyncio
import threading

import pytest

from replog.storage import compressed_checks
from replog.storage.batch_format import CODEC_ZSTD, NewRecord, encode_batch
from tests.replica.test_partition import WAIT_S, close_unless_closed, make_partition, records, still_pending

PRODUCER_ID = 77


def idempotent(first_sequence: int, count: int, codec: int = 0) -> bytearray:
    return encode_batch([NewRecord(b"k%d" % i, b"v" * 100) for i in range(count)], 0, codec,
                        producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=first_sequence)


class HeldChecks:
    """compressed_checks' threads hold each batch until the test lets them go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, WAIT_S), "no compressed batch reached the check"


@pytest.fixture
def held(monkeypatch):
    checks = HeldChecks()
    real = compressed_checks._check_in_thread

    def check_when_released(*args):
        checks.entered.set()
        checks.release.wait(WAIT_S)
        return real(*args)

    monkeypatch.setattr(compressed_checks, "_check_in_thread", check_when_released)
    yield checks
    checks.release.set()


@pytest.fixture
def single(tmp_path):
    partition = make_partition(tmp_path)
    yield partition
    close_unless_closed(partition)


async def test_an_append_behind_a_compressed_one_in_its_check_waits_its_turn(single, held):
    compressed = asyncio.create_task(single.append_as_leader(idempotent(0, 5, CODEC_ZSTD), acks=1, timeout_ms=1000))
    await held.wait_entered()
    behind = asyncio.create_task(single.append_as_leader(idempotent(5, 1), acks=1, timeout_ms=1000))
    assert await still_pending(behind)
    held.release.set()
    first, second = await asyncio.wait_for(asyncio.gather(compressed, behind), WAIT_S)
    # Out of order, the producer's sequence 5 would have gone first and its 0-4 been refused.
    assert [(first.error_code, first.base_offset), (second.error_code, second.base_offset)] == [(0, 0), (0, 5)]
    assert single.producer_state.producers[PRODUCER_ID].last_sequence == 5


async def test_an_append_whose_requester_left_before_its_turn_keeps_the_next_one_waiting(single, held):
    compressed = asyncio.create_task(single.append_as_leader(idempotent(0, 5, CODEC_ZSTD), acks=1, timeout_ms=1000))
    await held.wait_entered()
    abandoned = asyncio.create_task(single.append_as_leader(records(1), acks=1, timeout_ms=1000))
    assert await still_pending(abandoned)
    abandoned.cancel()
    last = asyncio.create_task(single.append_as_leader(idempotent(5, 1), acks=1, timeout_ms=1000))
    assert await still_pending(last)
    held.release.set()
    first, third = await asyncio.wait_for(asyncio.gather(compressed, last), WAIT_S)
    assert [(first.error_code, first.base_offset), (third.error_code, third.base_offset)] == [(0, 0), (0, 5)]


async def test_a_compressed_batch_refused_in_its_check_lets_the_next_append_go(single):
    bomb = encode_batch([NewRecord(b"k", bytes(80 << 20))], 0, CODEC_ZSTD)
    refused, accepted = await asyncio.wait_for(asyncio.gather(
        single.append_as_leader(bomb, acks=1, timeout_ms=1000),
        single.append_as_leader(records(2), acks=1, timeout_ms=1000)), WAIT_S)
    assert (refused.error_code, refused.record_errors) == (10, ())
    assert refused.error_message.startswith("records inflate past")
    assert (accepted.error_code, accepted.base_offset) == (0, 0)


async def test_an_uncompressed_append_with_nothing_ahead_completes_without_suspending(single):
    appending = single.append_as_leader(records(2), acks=1, timeout_ms=1000)
    with pytest.raises(StopIteration) as finished:
        appending.send(None)  # one step of the coroutine: no await on the way
    assert (finished.value.value.error_code, finished.value.value.base_offset) == (0, 0)


async def test_a_refused_record_is_named_in_the_answer(single):
    result = await single.append_as_leader(encode_batch([NewRecord(b"k", b"v", None, 2**62)], 0), acks=1,
                                           timeout_ms=1000)
    assert result.error_code == 32
    assert result.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [index for index, _ in result.record_errors] == [0]
    assert result.record_errors[0][1].startswith(f"Timestamp {2**62} of message with offset 0 is out of range.")
    assert single.log_end_offset == 0
