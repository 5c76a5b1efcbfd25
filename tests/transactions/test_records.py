"""__transaction_state's records in Kafka's TransactionLogKey/TransactionLogValue v0 layout."""

from __future__ import annotations

import struct

import pytest

from replog.groups.records import RecordFormatError
from replog.transactions.records import decode_key, decode_record, decode_value, encode_key, encode_value
from replog.transactions.state import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnState, TxnTransit


def transit(state: TxnState, partitions=frozenset()) -> TxnTransit:
    return TxnTransit(7, NO_PRODUCER_ID, 3, NO_PRODUCER_EPOCH, 60_000, state, frozenset(partitions), 1000, 2000)


def test_a_value_is_kafkas_v0_layout():
    value = encode_value(transit(TxnState.ONGOING, {("b", 1), ("a", 2), ("a", 0)}))
    expected = (struct.pack(">hqhib", 0, 7, 3, 60_000, 1) + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 2)
                + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 1)
                + struct.pack(">qq", 2000, 1000))
    assert value == expected
    assert encode_key("tx") == struct.pack(">hh", 0, 2) + b"tx"


@pytest.mark.parametrize("state", list(TxnState))
def test_values_round_trip(state):
    partitions = set() if state is TxnState.EMPTY else {("t", 0), ("u", 4)}
    assert decode_value(encode_value(transit(state, partitions))) == transit(state, partitions)


def test_an_empty_id_writes_null_partitions_and_a_tombstone_deletes():
    assert encode_value(transit(TxnState.EMPTY))[17:21] == struct.pack(">i", -1)
    assert decode_record(encode_key("tx"), None).value is None
    assert decode_key(encode_key("tx")) == "tx"


@pytest.mark.parametrize("data", [struct.pack(">h", 1) + b"\x00" * 40, struct.pack(">hqhib", 0, 7, 3, 1, 9)])
def test_unreadable_values_are_refused(data):
    with pytest.raises(RecordFormatError):
        decode_value(data)
