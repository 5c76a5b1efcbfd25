"""The stable partition hash (Kafka's own) and the __consumer_offsets record formats."""

from replog.groups import java_string_hash_code, partition_for
from replog.groups.placement import _kafka_abs
from replog.groups.records import (GroupKey, GroupValue, MemberValue, OffsetKey, OffsetValue, decode_batches,
                                   decode_group_value, decode_key, decode_offset_value, encode_batch,
                                   encode_group_value, encode_key, encode_offset_value)
from replog.storage.records import batch_headers, verify_batch


def test_hash_is_javas_string_hash_code():
    # Values of String.hashCode() in Java.
    assert java_string_hash_code("") == 0
    assert java_string_hash_code("test") == 3556498
    assert java_string_hash_code("hello") == 99162322
    assert java_string_hash_code("Aa") == java_string_hash_code("BB") == 2112
    assert java_string_hash_code("polygenelubricants") == -2**31  # Java's famous Integer.MIN_VALUE string
    # Outside the BMP Java hashes the UTF-16 surrogate pair: 0xD83D * 31 + 0xDE00.
    assert java_string_hash_code("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_partition_is_kafkas_abs_modulo():
    assert _kafka_abs(-2**31) == 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("my-group", 50) == abs(java_string_hash_code("my-group")) % 50
    assert all(0 <= partition_for(f"group-{index}", 7) < 7 for index in range(200))


def test_keys_and_values_round_trip():
    offset_key, group_key = OffsetKey("g", "topic", 3), GroupKey("g")
    assert decode_key(encode_key(offset_key)) == offset_key
    assert decode_key(encode_key(group_key)) == group_key
    assert encode_key(offset_key)[:2] == b"\x00\x01" and encode_key(group_key)[:2] == b"\x00\x02"
    offset = OffsetValue(42, 7, "meta \u00e9", 1700000000000)
    assert decode_offset_value(encode_offset_value(offset)) == offset
    member = MemberValue("m-1", "instance", "client", "/127.0.0.1", 30000, 10000, b"sub", b"assign")
    group = GroupValue("consumer", 5, "range", "m-1", 123, (member, member))
    assert decode_group_value(encode_group_value(group)) == group
    empty = GroupValue("consumer", 6, None, None, 124, ())
    assert decode_group_value(encode_group_value(empty)) == empty


def test_batches_are_valid_v2_and_read_back_with_tombstones():
    records = [(b"k1", b"v1"), (b"k2", None)]
    batch = encode_batch(records, 1700000000000)
    (header,) = batch_headers(batch)
    verify_batch(batch, header)  # the broker's own CRC32C check
    decoded = list(decode_batches(bytes(batch) + bytes(batch[:20])))  # a partial trailing batch is left
    assert len(decoded) == 1
    assert decoded[0].records == [(0, b"k1", b"v1"), (1, b"k2", None)]
    assert decoded[0].next_offset == 2
