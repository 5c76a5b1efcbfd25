"""Batches recorded from real clients (tests/support/client_batches/) are accepted
as they are, stored byte for byte apart from offset and epoch, and a corrupted copy is refused."""

import pytest

from replog.storage.batch_format import Scratch
from replog.storage.errors import CorruptRecordError
from replog.storage.records import AppendRules, check_and_convert, is_compressed
from tests.support.batches import CLIENT_BATCHES_DIR
from tests.support.log_fixtures import ManualClock, open_log, read_all

FIXTURES = sorted(CLIENT_BATCHES_DIR.glob("*.bin"))
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
RECORDED_MS = 1_700_000_000_000  # when the fixtures' producers stamped them
RULES = AppendRules(1 << 20, 2**63 - 1, 3_600_000, True, 64 << 20)


def test_every_client_and_codec_is_recorded():
    names = {path.stem for path in FIXTURES}
    assert {f"confluent-kafka-{codec}" for codec in CODEC_IDS} <= names
    assert {"aiokafka-none", "aiokafka-gzip", "kafka-python-none", "kafka-python-gzip"} <= names


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_client_batches_validate_append_and_read_back(codec, path, tmp_path):
    raw = path.read_bytes()
    headers = codec.validate_batches(raw, 1 << 20)
    assert [h.compression_codec for h in headers] == [CODEC_IDS[path.stem.rsplit("-", 1)[1]]] * len(headers)
    assert sum(h.record_count for h in headers) == 5
    records_max_timestamp = None
    if is_compressed(raw):
        scratch = Scratch(RULES.uncompressed_bytes_max)
        records_max_timestamp = check_and_convert(raw, RULES, RECORDED_MS, scratch).records_max_timestamp
        scratch.close()
    run = codec.assign_batches(bytearray(raw), RULES, 5, 3, RECORDED_MS, records_max_timestamp)
    assert (run.last_offset, run.max_timestamp) == (9, headers[0].max_timestamp)
    log = open_log(tmp_path / "clients-0", ManualClock(RECORDED_MS), compact=True)
    log.append(bytearray(raw), leader_epoch=0)
    log.append(bytearray(raw), leader_epoch=3)
    stored = read_all(log, 0)
    assert len(stored) == 2 * len(raw)
    second = codec.validate_batches(stored[len(raw):], 1 << 20)
    assert (second[0].base_offset, second[0].partition_leader_epoch) == (5, 3)
    # only the base offset and leader epoch (bytes 0-7 and 12-15) differ from what the client sent
    assert stored[len(raw) + 16:] == raw[16:] and stored[len(raw) + 8:len(raw) + 12] == raw[8:12]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
@pytest.mark.parametrize("where", ["crc", "records", "last_byte"])
def test_corrupted_client_batches_are_refused(codec, path, where):
    corrupted = bytearray(path.read_bytes())
    position = {"crc": 18, "records": 70, "last_byte": len(corrupted) - 1}[where]
    corrupted[position] ^= 0x40
    with pytest.raises(CorruptRecordError):
        codec.validate_batches(corrupted, 1 << 20)
