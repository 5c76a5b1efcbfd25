"""The aborted-transaction index of a segment: Kafka's .txnindex bytes, written behind,
truncated, reloaded, and the collection rule readers stop by."""

import struct

from replog.storage.transaction_index import ENTRY_SIZE_BYTES, AbortedTxn, TransactionIndex


def test_entries_are_kafkas_version_0_layout_written_behind(tmp_path):
    index = TransactionIndex(tmp_path / f"{0:020d}.txnindex")
    index.append(AbortedTxn(7, 10, 20, 21))
    assert not index.path.exists(), "written on flush, roll and close only"
    index.persist(fsync=True)
    index.append(AbortedTxn(8, 15, 30, 31))
    index.persist(fsync=False)
    raw = index.path.read_bytes()
    assert len(raw) == 2 * ENTRY_SIZE_BYTES == 68
    assert struct.unpack(">hqqqq", raw[:34]) == (0, 7, 10, 20, 21)

    reloaded = TransactionIndex(index.path)
    reloaded.load()
    assert reloaded.entries == [AbortedTxn(7, 10, 20, 21), AbortedTxn(8, 15, 30, 31)]


def test_a_torn_tail_is_cut_at_load_and_truncation_cuts_the_file(tmp_path):
    path = tmp_path / f"{0:020d}.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 7, 10, 20, 21) + struct.pack(">hqqqq", 0, 8, 15, 30, 31) + b"\0\0\0")
    index = TransactionIndex(path)
    index.load()
    assert len(index.entries) == 2 and path.stat().st_size == 68
    index.truncate_from(30)
    assert index.entries == [AbortedTxn(7, 10, 20, 21)] and path.stat().st_size == 34
    index.truncate_from(0)
    assert not path.exists()


def test_collect_stops_at_an_entry_whose_lso_reaches_the_bound(tmp_path):
    index = TransactionIndex(tmp_path / f"{0:020d}.txnindex")
    for entry in (AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10), AbortedTxn(3, 12, 14, 15)):
        index.append(entry)
    assert index.collect(6, 10) == ([AbortedTxn(2, 3, 9, 10)], True)
    assert index.collect(0, 100) == ([AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10), AbortedTxn(3, 12, 14, 15)],
                                     False)
