import pytest

from replog.storage.batch_format import CONTROL_BATCH_BIT, HEADER_SIZE_BYTES, TRANSACTIONAL_BIT, parse_header, verify_batch
from replog.storage.control_batches import ControlType, Marker, decode_marker, encode_marker
from replog.storage.errors import InvalidRecordError


@pytest.mark.parametrize("control_type", list(ControlType))
def test_a_marker_reads_back_as_written(control_type):
    marker = Marker(producer_id=4711, producer_epoch=3, control_type=control_type, coordinator_epoch=9)
    batch = encode_marker(marker, timestamp_ms=1_700_000_000_000)
    header = parse_header(batch, 0)
    verify_batch(batch, header)
    assert header.attributes & (CONTROL_BATCH_BIT | TRANSACTIONAL_BIT) == CONTROL_BATCH_BIT | TRANSACTIONAL_BIT
    assert header.record_count == 1
    assert decode_marker(batch) == marker
    assert decode_marker(batch).committed is (control_type is ControlType.COMMIT)


def test_kafkas_bytes_for_a_commit_marker():
    # Kafka's EndTransactionMarker: key (version 0, type 1), value (version 0, coordinator epoch).
    batch = encode_marker(Marker(1, 0, ControlType.COMMIT, 5), timestamp_ms=0)
    body = bytes(batch[HEADER_SIZE_BYTES:])
    assert b"\x00\x00\x00\x01" in body and b"\x00\x00\x00\x00\x00\x05" in body


def test_an_unknown_control_type_is_refused():
    batch = encode_marker(Marker(1, 0, ControlType.COMMIT, 5), timestamp_ms=0)
    at = bytes(batch).index(b"\x00\x00\x00\x01", HEADER_SIZE_BYTES)
    batch[at + 3] = 7
    with pytest.raises(InvalidRecordError):
        decode_marker(batch)
