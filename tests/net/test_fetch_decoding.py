"""The hand-written Fetch response decoding (net/fetch_decoding.py) reads what kio writes, for
every version, and refuses a garbled frame with a FrameError."""

from __future__ import annotations

import uuid

import pytest

from replog.net import codec
from replog.net.codec import ApiKey, SUPPORTED_VERSIONS
from replog.net.fetch_decoding import FIRST_TOPIC_ID_VERSION, FetchedPartition, decode_fetch_response

FETCH_VERSIONS = range(SUPPORTED_VERSIONS[ApiKey.FETCH][0], SUPPORTED_VERSIONS[ApiKey.FETCH][1] + 1)
CORRELATION_ID = 42
ORDERS_ID, OTHER_ID = uuid.uuid4(), uuid.uuid4()  # named so from version 13 on


def named(version: int, name: str, topic_id: uuid.UUID) -> dict:
    return {"topic_id": topic_id} if version >= FIRST_TOPIC_ID_VERSION else {"topic": name}


def partition(index: int, error_code: int, high_watermark: int, log_start_offset: int, records: bytes | None,
              aborted: list | None) -> dict:
    return {"partition_index": index, "error_code": error_code, "high_watermark": high_watermark,
            "last_stable_offset": high_watermark, "log_start_offset": log_start_offset,
            "aborted_transactions": aborted, "preferred_read_replica": -1, "records": records}


def kio_frame(version: int, error_code: int = 0) -> bytes:
    """A response as kio writes it, without the size prefix."""
    body = codec.build(codec.response_schema(ApiKey.FETCH, version), {
        "throttle_time": 0, "error_code": error_code, "session_id": 7,
        "responses": [
            {**named(version, "orders", ORDERS_ID), "partitions": [
                partition(0, 0, 120, 7, b"batch-onebatch-two", [{"producer_id": 5, "first_offset": 100}]),
                partition(3, 1, -1, -1, None, None),
            ]},
            {**named(version, "é-topic", OTHER_ID), "partitions": [partition(1, 0, 5, 0, b"x" * 300, [])]},
        ],
    })
    return b"".join(codec.encode_response(ApiKey.FETCH, version, CORRELATION_ID, body))[4:]


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_decoding_reads_what_kio_writes_for_every_version(version):
    error_code, session_id, partitions = decode_fetch_response(version, memoryview(bytearray(kio_frame(version))))
    log_start = (lambda offset: offset) if version >= 5 else (lambda offset: -1)
    orders, other = (ORDERS_ID.hex, OTHER_ID.hex) if version >= FIRST_TOPIC_ID_VERSION else ("orders", "é-topic")
    assert (error_code, session_id) == (0, 7 if version >= 7 else 0)
    assert partitions == [
        FetchedPartition(orders, 0, 0, 120, 120, log_start(7), b"batch-onebatch-two"),
        FetchedPartition(orders, 3, 1, -1, -1, log_start(-1), b""),
        FetchedPartition(other, 1, 0, 5, 5, log_start(0), b"x" * 300),
    ]
    assert all(type(found.records) is bytes for found in partitions)  # copies: the frame's buffer is reused


@pytest.mark.parametrize("version", [7, 12])
def test_the_response_error_code_is_read(version):
    assert decode_fetch_response(version, kio_frame(version, error_code=71))[0] == 71


@pytest.mark.parametrize("version", [4, 12])
def test_a_garbled_frame_is_a_frame_error(version):
    whole = kio_frame(version)
    for garbled in (whole[:-1], whole[: len(whole) // 2], whole + b"\0"):
        with pytest.raises(codec.FrameError):
            decode_fetch_response(version, garbled)
