"""Where the lengths, counts and values lie in an encoded request: every string, bytes and array
length and every tagged-field count and size, with its offset in the frame and its form on the
wire; every fixed-width value and string's bytes, with their offsets and Kafka types; and where
each array's elements end.

The map is read back from the bytes kio's entity_writer wrote, walking the schema as kio's
reader does (kio's own field classification, the header's client_id always a legacy string);
`map_frame` checks that the walk ends exactly at the end of the frame, so a map that disagreed
with kio would fail loudly rather than mutate the wrong bytes.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import NamedTuple

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from replog.net import codec

_FIXED_BYTES = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
SIZE_PREFIX_BYTES = 4


class Length(NamedTuple):
    """A length or count as written: `form` is "int16", "int32" or "uvarint"; a uvarint of a
    compact length holds the count plus one (`bias` 1), of a tagged field's count or size the
    count itself (`bias` 0)."""

    offset: int  # in the frame, size prefix included
    width: int  # bytes it takes now
    form: str
    bias: int
    nullable: bool
    path: str  # the field it measures, e.g. "topics[0].name"


class Value(NamedTuple):
    """A value's bytes: a fixed-width one (`kafka_type` int8 ... int64, bool, uuid, timedelta_*)
    or a string's content."""

    offset: int
    width: int
    kafka_type: str
    path: str


class Array(NamedTuple):
    """An array: its count as written, and where its elements end."""

    count: Length
    elements: int
    end: int


class FrameMap(NamedTuple):
    lengths: list[Length]
    values: list[Value]
    arrays: list[Array]


def map_frame(api_key: int, version: int, frame: bytes) -> FrameMap:
    schema = codec.request_schema(api_key, version)
    walk = _Walk(frame, FrameMap([], [], []))
    position = walk.entity(schema.__header_schema__, SIZE_PREFIX_BYTES, "header", in_header=True)
    position = walk.entity(schema, position, "")
    if position != len(frame):
        raise AssertionError(f"api {api_key} v{version}: the map ends at {position} of {len(frame)} bytes")
    return walk.found


class _Walk(NamedTuple):
    frame: bytes
    found: FrameMap

    def entity(self, schema: type, position: int, path: str, in_header: bool = False) -> int:
        flexible = schema.__flexible__
        for field in dataclasses.fields(schema):
            if field.metadata.get("tag") is not None:
                continue
            where = f"{path}.{field.name}" if path else field.name
            legacy_string = in_header and field.name == "client_id"  # as Kafka (and kio) write it
            position = self.field(field, position, where, flexible and not legacy_string)
        if flexible:
            position = self.tagged_fields(position, path)
        return position

    def field(self, field: dataclasses.Field, position: int, path: str, flexible: bool) -> int:
        kind = classify_field(field)
        nullable = is_optional(field)
        if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
            count, position = self.length(position, path, flexible, "int32", nullable)
            written = self.found.lengths[-1]
            for index in range(max(count, 0)):  # bounded by the frame, which kio wrote
                item_path = f"{path}[{index}]"
                if isinstance(kind, EntityTupleField):
                    position = self.entity(kind.type_, position, item_path)
                else:
                    position = self.primitive(field.metadata["kafka_type"], position, item_path, flexible, False)
            self.found.arrays.append(Array(written, max(count, 0), position))
            return position
        if isinstance(kind, EntityField):
            if nullable:
                marker = self.frame[position]
                position += 1
                if marker == 0xFF:
                    return position
            return self.entity(kind.type_, position, path)
        return self.primitive(field.metadata["kafka_type"], position, path, flexible, nullable)

    def primitive(self, kafka_type: str, position: int, path: str, flexible: bool, nullable: bool) -> int:
        if kafka_type in _FIXED_BYTES:
            self.found.values.append(Value(position, _FIXED_BYTES[kafka_type], kafka_type, path))
            return position + _FIXED_BYTES[kafka_type]
        legacy_form = "int16" if kafka_type == "string" else "int32"
        size, position = self.length(position, path, flexible, legacy_form, nullable)
        if size > 0:
            self.found.values.append(Value(position, size, kafka_type, path))
        return position + max(size, 0)

    def length(self, position: int, path: str, flexible: bool, legacy_form: str, nullable: bool) -> tuple[int, int]:
        if flexible:
            raw, end = read_uvarint(self.frame, position)
            self.found.lengths.append(Length(position, end - position, "uvarint", 1, nullable, path))
            return raw - 1, end
        layout = _I16 if legacy_form == "int16" else _I32
        self.found.lengths.append(Length(position, layout.size, legacy_form, 0, nullable, path))
        return layout.unpack_from(self.frame, position)[0], position + layout.size

    def tagged_fields(self, position: int, path: str) -> int:
        where = f"{path}.<tags>" if path else "<tags>"
        count, end = read_uvarint(self.frame, position)
        self.found.lengths.append(Length(position, end - position, "uvarint", 0, False, where))
        position = end
        for _ in range(count):  # bounded by the frame, which kio wrote
            _, position = read_uvarint(self.frame, position)
            size, end = read_uvarint(self.frame, position)
            self.found.lengths.append(Length(position, end - position, "uvarint", 0, False, f"{where}.size"))
            position = end + size
        return position


def read_uvarint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:  # bounded: the frames mapped are kio's, whose uvarints end
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7

