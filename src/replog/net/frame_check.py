"""The bounds of a Kafka frame, checked before any reader builds anything from it: every string,
bytes and array length and every tagged field's size against the bytes left in the frame, and
the items the frame holds (array elements and tagged fields) against a budget.

Why: kio's native reader reserves room for an array's claimed count before reading an item of
it, so a request of 19 bytes claiming 2**32 - 2 items asked for 34 GB, and an allocation
failure aborts the process (Python cannot catch it). Kafka's generated readers refuse a count larger than the bytes
left; this check refuses one whose items, at their smallest encoding, cannot fit in the bytes
left, so that a frame that passes makes no reader reserve more than a few times its size.

Programs: the schema of a message (header and body, from kio's dataclasses: field metadata
`kafka_type`, `__flexible__`, tags) is compiled once per (api key, version, direction) into a
flat program of int32 words, walked over the frame without building anything. The wire shape
is the one kio reads (kio/serial/_parse, whose native compile this mirrors): RequestHeader's
client_id is always a legacy nullable string; a nullable struct (KIP-893) has an int8 marker,
-1 for null and 1 otherwise (anything else is refused: Kafka and kio read other markers
differently); a tagged field is read by its field's schema, and a known tag's content must fill
exactly its declared size. Null is refused where the reader would refuse it, and for arrays
where the schema's type does not allow None (Kafka refuses those; kio would hand a handler None
where the schema promises a sequence).

    END                                  end of a block (the program's entry or a sub-block)
    FIXED width                          a fixed-width field (int8 .. int64, uuid, bool)
    STRING nullable                      int16 length, then bytes (-1: null)
    BYTES nullable                       int32 length, then bytes (-1: null)
    COMPACT nullable                     uvarint length + 1, then bytes (0: null)
    ARRAY nullable item_bytes_min block  int32 count (-1: null), then that many items of block
    COMPACT_ARRAY nullable item_bytes_min block     uvarint count + 1 (0: null), then items
    FIXED_ARRAY nullable width           int32 count, then count * width bytes
    COMPACT_FIXED_ARRAY nullable width   uvarint count + 1, then count * width bytes
    NULLABLE_STRUCT block                int8 marker (-1 null, 1 present), then block
    TAGS table                           uvarint count, then (uvarint tag, uvarint size, content)
                                         each; table: n, then n pairs (tag, block), sorted

Two implementations with one contract (FrameChecker): the pure-Python walker below and the
compiled `_framecheck` extension beside this file, used whenever it was built. The compiled one
exists because this runs on every request, a follower's Fetch of thousands of partitions every
round among them, and a walk in Python costs more than kio's decode itself.
"""

from __future__ import annotations

import array
import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from typing import NamedTuple

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

# The items (array elements and tagged fields, at any depth) one request or Fetch response may
# hold. Kafka has no such limit: its readers bound a count by the bytes left, and a broker's work
# then by socket.request.max.bytes (100 MiB), which lets a few MiB name a million topics,
# whose decoding and answer hold the event loop for seconds. The decode of the items a request
# holds is one call into kio, which no handler can slice, so this bounds how long one request
# holds the loop (bench/big_requests.py prints another client's wait behind the largest
# requests), and the memory of its decoded objects (a few hundred bytes per item). Real requests stay far below: at the 10,000 partitions replog is run with, a
# follower's Fetch of all of them holds about 10,100 items, a consumer's OffsetCommit of all of
# them about 11,000; a producer's request of default size (1 MB) cannot carry 15,000 partitions.
ITEMS_MAX = 50_000

END, FIXED, STRING, BYTES, COMPACT, ARRAY, COMPACT_ARRAY, FIXED_ARRAY, COMPACT_FIXED_ARRAY, NULLABLE_STRUCT, TAGS = range(11)
_OPERANDS = {END: 0, FIXED: 1, STRING: 1, BYTES: 1, COMPACT: 1, ARRAY: 3, COMPACT_ARRAY: 3, FIXED_ARRAY: 2,
             COMPACT_FIXED_ARRAY: 2, NULLABLE_STRUCT: 1, TAGS: 1}
# The fewest bytes a field of each op takes on the wire (its length or count prefix, or marker).
_BYTES_MIN = {STRING: 2, BYTES: 4, COMPACT: 1, ARRAY: 4, COMPACT_ARRAY: 1, FIXED_ARRAY: 4, COMPACT_FIXED_ARRAY: 1,
              NULLABLE_STRUCT: 1, TAGS: 1}
_WIDTHS = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
           "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16}
UVARINT_BYTES_MAX = 5  # a uvarint of an int32


class Program(NamedTuple):
    """A compiled schema: `code` as native int32 words (for the compiled walker), `words` the
    same as a tuple (for the Python one), `entry` where the message's block starts."""

    code: bytes
    words: tuple[int, ...]
    entry: int


class _Assembler:
    """Compiles entities into blocks of one program; each entity is compiled once."""

    def __init__(self) -> None:
        self.words: list[int] = []
        self._blocks: dict[tuple[type, bool], list[int]] = {}

    def block(self, ops: list[int]) -> int:
        """Append `ops` and an END; where they start."""
        start = len(self.words)
        self.words += ops
        self.words.append(END)
        return start

    def entity(self, schema: type, header: bool = False) -> list[int]:
        """The ops of an entity's fields and tagged fields, to be inlined where it is read."""
        key = (schema, header)
        if key not in self._blocks:
            ops: list[int] = []
            tags: list[tuple[int, int]] = []
            for field in dataclasses.fields(schema):
                tag = get_field_tag(field)
                field_ops = self._field(field, schema.__flexible__, header and field.name == "client_id", tag is not None)
                if tag is None:
                    ops += field_ops
                else:
                    tags.append((int(tag), self.block(field_ops)))
            if schema.__flexible__:
                table = self.block([len(tags), *(word for pair in sorted(tags) for word in pair)])
                ops += [TAGS, table]
            self._blocks[key] = _merge_fixed(ops)
        return self._blocks[key]

    def _field(self, field: dataclasses.Field, flexible: bool, legacy_nullable_string: bool, tagged: bool) -> list[int]:
        if legacy_nullable_string:  # RequestHeader.client_id, in every header version
            return [STRING, 1]
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            return self._array(self.entity(kind.type_), flexible, _hint_nullable(field))
        if isinstance(kind, EntityField):
            ops = self.entity(kind.type_)
            # kio reads a marker wherever the type allows None, tagged or not.
            return [NULLABLE_STRUCT, self.block(ops)] if is_optional(field) else ops
        kafka_type = get_schema_field_type(field)
        if isinstance(kind, PrimitiveTupleField):
            return self._array(_primitive(kafka_type, flexible, nullable=False), flexible, _hint_nullable(field))
        # A tagged field's presence says whether it is set, so its value itself is never null.
        return _primitive(kafka_type, flexible, nullable=is_optional(field) and not tagged)

    def _array(self, item_ops: list[int], flexible: bool, nullable: bool) -> list[int]:
        if len(item_ops) == 2 and item_ops[0] == FIXED:
            return [COMPACT_FIXED_ARRAY if flexible else FIXED_ARRAY, int(nullable), item_ops[1]]
        return [COMPACT_ARRAY if flexible else ARRAY, int(nullable), _ops_bytes_min(item_ops), self.block(item_ops)]


def _primitive(kafka_type: str, flexible: bool, nullable: bool) -> list[int]:
    if kafka_type in _WIDTHS:
        return [FIXED, _WIDTHS[kafka_type]]
    if kafka_type in ("string", "bytes", "records"):
        legacy = STRING if kafka_type == "string" else BYTES
        return [COMPACT if flexible else legacy, int(nullable)]
    raise NotImplementedError(f"no frame check for kafka_type {kafka_type!r}")


def _hint_nullable(field: dataclasses.Field) -> bool:
    return typing.get_origin(field.type) in (typing.Union, types.UnionType)


def _merge_fixed(ops: list[int]) -> list[int]:
    """`ops` with each run of FIXED ops made one (a Fetch partition's six numbers: one skip)."""
    merged: list[int] = []
    last_width = -1  # where the width of a FIXED op ending `merged` is, else -1
    position = 0
    while position < len(ops):  # bounded by the ops' length
        op = ops[position]
        if op == FIXED and last_width >= 0:
            merged[last_width] += ops[position + 1]
        else:
            merged += ops[position:position + _OPERANDS[op] + 1]
            last_width = len(merged) - 1 if op == FIXED else -1
        position += _OPERANDS[op] + 1
    return merged


def _ops_bytes_min(ops: list[int]) -> int:
    total = position = 0
    while position < len(ops):  # bounded by the ops' length
        op = ops[position]
        total += ops[position + 1] if op == FIXED else _BYTES_MIN[op]
        position += _OPERANDS[op] + 1
    return total


def compile_message(header: type, body: type) -> Program:
    """The program of a frame holding `header` then `body` (kio schema classes)."""
    assembler = _Assembler()
    ops = _merge_fixed(assembler.entity(header, header=header.__name__ == "RequestHeader") + assembler.entity(body))
    entry = assembler.block(ops)
    words = tuple(assembler.words)
    return Program(array.array("i", words).tobytes(), words, entry)


# -- the pure-Python walker ------------------------------------------------------------------------

_I8, _I16, _I32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")


class _Walk:
    __slots__ = ("words", "frame", "size", "items", "items_max")

    def __init__(self, words: tuple[int, ...], frame, items_max: int):
        self.words, self.frame, self.size, self.items, self.items_max = words, frame, len(frame), 0, items_max

    def need(self, position: int, size: int) -> None:
        if size > self.size - position:
            raise ValueError(f"{size} bytes needed at byte {position}, {self.size - position} left")

    def uvarint(self, position: int) -> tuple[int, int]:
        value = 0
        for index in range(UVARINT_BYTES_MAX):
            self.need(position + index, 1)
            byte = self.frame[position + index]
            value |= (byte & 0x7F) << (7 * index)
            if not byte & 0x80:
                return value, position + index + 1
        raise ValueError(f"uvarint longer than {UVARINT_BYTES_MAX} bytes at byte {position}")

    def length(self, op: int, position: int) -> tuple[int, int]:
        """(length or count, -1 for null; position after it) of a STRING/BYTES/ARRAY-like prefix."""
        if op == STRING:
            self.need(position, 2)
            return _I16.unpack_from(self.frame, position)[0], position + 2
        if op in (BYTES, ARRAY, FIXED_ARRAY):
            self.need(position, 4)
            return _I32.unpack_from(self.frame, position)[0], position + 4
        value, after = self.uvarint(position)
        return value - 1, after

    def count(self, length: int, start: int, after: int, nullable: int, item_bytes_min: int) -> int:
        """Refuses an array whose count cannot be right; the items it adds to the budget."""
        if length < -1:
            raise ValueError(f"negative length {length} at byte {start}")
        if length == -1:
            if not nullable:
                raise ValueError(f"null at byte {start} where the schema allows none")
            return 0
        left = self.size - after
        if length > left // max(item_bytes_min, 1):
            raise ValueError(f"count {length} at byte {start}: the {left} bytes left hold fewer such items")
        self.items += length
        if self.items > self.items_max:
            raise ValueError(f"more than {self.items_max} items at byte {start}")
        return length

    def block(self, pc: int, position: int) -> int:
        words = self.words
        while True:  # bounded by the block's length: every op moves pc on
            op = words[pc]
            if op == END:
                return position
            if op == FIXED:
                self.need(position, words[pc + 1])
                position += words[pc + 1]
            elif op in (STRING, BYTES, COMPACT):
                length, after = self.length(op, position)
                if length < -1:
                    raise ValueError(f"negative length {length} at byte {position}")
                if length == -1:
                    if not words[pc + 1]:
                        raise ValueError(f"null at byte {position} where the schema allows none")
                elif length > self.size - after:
                    raise ValueError(f"length {length} at byte {position} with {self.size - after} bytes left")
                else:
                    after += length
                position = after
            elif op in (ARRAY, COMPACT_ARRAY):
                length, after = self.length(op, position)
                count = self.count(length, position, after, words[pc + 1], words[pc + 2])
                position = after
                for _ in range(count):  # bounded: count items fit in the bytes left
                    position = self.block(words[pc + 3], position)
            elif op in (FIXED_ARRAY, COMPACT_FIXED_ARRAY):
                length, after = self.length(op, position)
                count = self.count(length, position, after, words[pc + 1], words[pc + 2])
                position = after + count * words[pc + 2]
            elif op == NULLABLE_STRUCT:
                self.need(position, 1)
                marker = _I8.unpack_from(self.frame, position)[0]
                if marker not in (-1, 1):
                    raise ValueError(f"nullable struct marker {marker} at byte {position}")
                position += 1
                if marker == 1:
                    position = self.block(words[pc + 1], position)
            elif op == TAGS:
                position = self.tags(words[pc + 1], position)
            else:
                raise AssertionError(f"op {op} at word {pc}")
            pc += _OPERANDS[op] + 1

    def tags(self, table: int, position: int) -> int:
        count, position = self.uvarint(position)
        left = self.size - position
        if count > left // 2:
            raise ValueError(f"{count} tagged fields at byte {position} with {left} bytes left")
        self.items += count
        if self.items > self.items_max:
            raise ValueError(f"more than {self.items_max} items at byte {position}")
        words = self.words
        for _ in range(count):  # bounded: each takes at least 2 bytes
            start = position
            tag, position = self.uvarint(position)
            size, position = self.uvarint(position)
            if size > self.size - position:
                raise ValueError(f"tagged field of {size} bytes at byte {start} with {self.size - position} bytes left")
            block = next((words[table + 2 + 2 * index] for index in range(words[table])
                          if words[table + 1 + 2 * index] == tag), None)
            if block is None:  # unknown: skipped, as Kafka skips it
                position += size
                continue
            end = self.block(block, position)
            if end - position != size:
                raise ValueError(f"tagged field {tag} at byte {start} declares {size} bytes and holds {end - position}")
            position = end
        return position


def _check_py(program: Program, frame, position: int, items_max: int) -> int:
    if not 0 <= position <= len(frame):
        raise ValueError(f"position {position} outside a frame of {len(frame)} bytes")
    return _Walk(program.words, frame, items_max).block(program.entry, position)


class FrameChecker(NamedTuple):
    """One implementation of the frame check: the pure-Python one or the compiled one.

    check(program, frame, position, items_max) -> int
        Walks the message `program` describes from `position` of `frame` (any buffer) and
        returns where it ends; bytes after it are not looked at. Raises ValueError, naming the
        byte at fault, at the first length or count that runs past the frame, is negative, or
        is null where the schema allows none, at a known tagged field whose content does not
        fill its declared size, at a nullable struct marker other than -1 and 1, and once the
        items (array elements and tagged fields) passed exceed `items_max`. Reads nothing else:
        UTF-8, booleans and values are the reader's to judge.

    Both refuse the same frames, with the same messages.
    """

    name: str
    check: Callable[[Program, object, int, int], int]


PURE_PYTHON = FrameChecker("python", _check_py)


def _load_compiled() -> FrameChecker | None:
    try:
        from replog.net import _framecheck
    except ImportError:  # not built (no C compiler at install): the pure-Python path serves
        return None

    return FrameChecker("c", _framecheck.check)


COMPILED = _load_compiled()
CHECKER = COMPILED or PURE_PYTHON
check = CHECKER.check
