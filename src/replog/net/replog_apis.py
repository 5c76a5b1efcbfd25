"""replog's own Kafka-protocol APIs, which no Kafka version defines, declared in kio's schema form
(kio knows only Kafka's) so that the codec reads and writes them like any other API.

API key 32000, StateChangeEvents v0 (flexible): the recent state-change lifecycle events of the
broker asked (obs/state_change_events.py), for `replog cluster state-changes`. Kafka's API keys
are small consecutive numbers (0 to about 90 in Kafka 4); 32000 is far from them and inside
the int16 the header carries. Kafka clients skip API keys they do not know in an ApiVersions
answer.

Request: the events after `since_cursor` of ring `incarnation` (an answer's; 0 at first: a
cursor of another incarnation is read as "from the start", since the broker restarted), of
`topic` (null: all) and `partition` (-1: all), at most `max_events`; with
`include_queued`, also every request waiting in the store's state-change queues, which no
broker has received yet.
"""

# No `from __future__ import annotations`: kio reads the fields' types, which must not be strings.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

STATE_CHANGE_EVENTS = 32000
ALL_PARTITIONS = -1
EVENTS_PER_ANSWER_MAX = 1000  # about 100 KB: a reader asks again from the answer's next_cursor


class _Nested:
    """What kio reads of each entity class of StateChangeEvents v0 besides its fields."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STATE_CHANGE_EVENTS)
    __header_schema__: ClassVar[type] = ResponseHeader


@dataclass(frozen=True, slots=True, kw_only=True)
class StateChangeEventsRequest(_Nested):
    __type__: ClassVar = EntityType.request
    __header_schema__: ClassVar[type] = RequestHeader
    topic: str | None = field(metadata={"kafka_type": "string"}, default=None)
    partition: i32 = field(metadata={"kafka_type": "int32"}, default=i32(ALL_PARTITIONS))
    incarnation: i64 = field(metadata={"kafka_type": "int64"}, default=i64(0))
    since_cursor: i64 = field(metadata={"kafka_type": "int64"}, default=i64(0))
    max_events: i32 = field(metadata={"kafka_type": "int32"})
    include_queued: bool = field(metadata={"kafka_type": "bool"}, default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateChangeEventEntry(_Nested):
    """An event of the ring; or, in `queued`, a request waiting in its queue (kind "queued",
    cursor 0, timestamp -1: no broker recorded it)."""

    cursor: i64 = field(metadata={"kafka_type": "int64"})
    kind: str = field(metadata={"kafka_type": "string"})
    request_type: str = field(metadata={"kafka_type": "string"})
    topic: str = field(metadata={"kafka_type": "string"})
    partition: i32 = field(metadata={"kafka_type": "int32"})
    from_broker: i32 = field(metadata={"kafka_type": "int32"})
    to_broker: i32 = field(metadata={"kafka_type": "int32"})
    epoch: i32 = field(metadata={"kafka_type": "int32"})
    queue_sequence: str = field(metadata={"kafka_type": "string"})
    timestamp_ms: i64 = field(metadata={"kafka_type": "int64"})
    reason: str | None = field(metadata={"kafka_type": "string"}, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateChangeEventsResponse(_Nested):
    __type__: ClassVar = EntityType.response
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    broker_id: i32 = field(metadata={"kafka_type": "int32"})
    incarnation: i64 = field(metadata={"kafka_type": "int64"})
    # The oldest event the ring still holds: a reader whose cursor is below this one less missed events.
    first_cursor: i64 = field(metadata={"kafka_type": "int64"})
    next_cursor: i64 = field(metadata={"kafka_type": "int64"})  # to ask from next
    events: tuple[StateChangeEventEntry, ...]
    queued: tuple[StateChangeEventEntry, ...] = ()


# (api key, version) -> (request schema, response schema)
SCHEMAS: dict[tuple[int, int], tuple[type, type]] = {
    (STATE_CHANGE_EVENTS, 0): (StateChangeEventsRequest, StateChangeEventsResponse),
}
