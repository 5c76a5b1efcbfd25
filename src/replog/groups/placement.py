"""Which partition of __consumer_offsets holds a group, and so which broker coordinates it.

Kafka's own function, so that a group lands on the same partition number as in Kafka:
`abs(javaStringHashCode(groupId)) % numPartitions`, where Java's String.hashCode runs over
UTF-16 code units in 32-bit two's complement and Utils.abs maps Integer.MIN_VALUE to 0. Never
Python's `hash()`: it is salted per process, and every broker must agree.
"""

from __future__ import annotations

OFFSETS_TOPIC = "__consumer_offsets"

_INT_MASK = 0xFFFFFFFF


def java_string_hash_code(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as an int32."""
    units = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(units), 2):  # bounded by the string's length
        value = (31 * value + (units[index] << 8 | units[index + 1])) & _INT_MASK
    return value - (1 << 32) if value & 0x80000000 else value


def _kafka_abs(value: int) -> int:
    # Kafka's Utils.abs: Integer.MIN_VALUE has no positive int32, and Kafka maps it to 0.
    return 0 if value == -(1 << 31) else abs(value)


def partition_for(group_id: str, partitions: int) -> int:
    return _kafka_abs(java_string_hash_code(group_id)) % partitions
