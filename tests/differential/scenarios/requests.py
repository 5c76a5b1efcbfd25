"""Requests a broker cannot serve as asked: unknown APIs and versions, frames and records over
the limits, corrupt batches, names that do not exist."""

from __future__ import annotations

import struct

from replog.net.codec import ApiKey
from tests.support.batches import build_batch

from ..protocol import create_topic, produce
from ..targets import CLOSED, Target
from .registry import scenario

REQUEST_MAX_BYTES = 100 * 1024 * 1024  # socket.request.max.bytes, the same default in both
MESSAGE_MAX_BYTES = 1_048_588  # message.max.bytes, the same default in both
NO_TAGGED_FIELDS = b"\x00"
_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id's length


def _frame_at(api_key: int, api_version: int) -> bytes:
    """A request header at any version, whether any schema has it or not: a flexible one (its
    empty tagged fields are a byte that a non-flexible reader ignores as trailing) with no body."""
    client = b"differential"
    message = _HEADER.pack(api_key, api_version, 1, len(client)) + client + NO_TAGGED_FIELDS
    return struct.pack(">i", len(message)) + message


def _answered_or_closed(target: Target, frame: bytes) -> str:
    answer = target.exchange_frame(frame)
    return answer if answer == CLOSED else "answered"


@scenario
def api_versions_beyond_the_broker(target: Target) -> dict:
    """ApiVersions at a version the broker does not know: error 35 in a v0 body that still lists
    the broker's ApiVersions range, so that the client can retry at one it speaks."""
    answer = target.exchange_frame(_frame_at(ApiKey.API_VERSIONS, 99))
    error_code, count = struct.unpack_from(">hi", answer, 4)
    ranges = {key: (low, high) for key, low, high in struct.iter_unpack(">hhh", answer[10:10 + 6 * count])}
    return {"error_code": error_code, "api_versions_range": ranges.get(ApiKey.API_VERSIONS)}


@scenario
def metadata_beyond_the_broker(target: Target) -> str:
    return _answered_or_closed(target, _frame_at(ApiKey.METADATA, 99))


@scenario
def produce_below_the_kafka_4_floor(target: Target) -> str:
    return _answered_or_closed(target, _frame_at(ApiKey.PRODUCE, 2))


@scenario
def unknown_api_key(target: Target) -> str:
    return _answered_or_closed(target, _frame_at(9999, 0))


@scenario
def frame_over_the_request_limit(target: Target) -> str:
    """Only the size prefix and a header: the size alone refuses it."""
    return _answered_or_closed(target, struct.pack(">i", REQUEST_MAX_BYTES + 1) + _HEADER.pack(ApiKey.METADATA, 12, 1, 0))


@scenario
def produce_to_an_unknown_topic(target: Target) -> str:
    return produce(target, "differential-nowhere", 0, build_batch())["error_code"]


@scenario
def produce_to_a_partition_the_topic_lacks(target: Target) -> str:
    create_topic(target, "differential-one-partition")
    return produce(target, "differential-one-partition", 5, build_batch())["error_code"]


@scenario
def produce_a_batch_over_max_message_bytes(target: Target) -> str:
    create_topic(target, "differential-oversized")
    return produce(target, "differential-oversized", 0, build_batch(payload_bytes=MESSAGE_MAX_BYTES + 1000))["error_code"]


@scenario
def produce_a_batch_with_a_bad_crc(target: Target) -> str:
    create_topic(target, "differential-corrupt")
    batch = build_batch()
    batch[-1] ^= 0xFF  # a record byte: covered by the CRC
    return produce(target, "differential-corrupt", 0, batch)["error_code"]


@scenario
def metadata_of_an_unknown_topic(target: Target) -> list:
    return [(topic["name"], topic["error_code"]) for topic in target.metadata(["differential-nowhere"])["topics"]]
