"""The frame check (net/frame_check.py) refuses every length, count and tagged-field size the
frame cannot hold, and frames past the item budget, before kio reads anything; valid messages
of every (api, version) pass and decode exactly as kio decodes them. Each test runs both
implementations (the compiled one where it was built), which must agree on every frame."""

# No `from __future__ import annotations`: kio reads the types of the schemas declared below.
import io
import shutil
import struct
import subprocess
import sys
import sysconfig
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import Records, i8, i16, i32

from replog.net import codec, frame_check
from replog.net.codec import ApiKey, SUPPORTED_VERSIONS
from replog.net.frame_check import COMPILED, ITEMS_MAX, PURE_PYTHON
from tests.hostile.frame_map import SIZE_PREFIX_BYTES, map_frame
from tests.hostile.seeds import Names, all_seeds

CHECKERS = [PURE_PYTHON] + ([COMPILED] if COMPILED else [])
# Two frames that killed a broker: a Metadata v9 request whose compact topic array claims 2**32 - 2
# items (kio reserved 34 GB), and a Metadata v1 request claiming 2**31 - 1 (16 GB).
METADATA_V9_HUGE_ARRAY = struct.pack(">hhih", ApiKey.METADATA, 9, 1, -1) + b"\0" + b"\xff\xff\xff\xff\x0f" + b"\0\0\0"
METADATA_V1_HUGE_ARRAY = struct.pack(">hhih", ApiKey.METADATA, 1, 1, -1) + struct.pack(">i", 2**31 - 1)
INFLATED = {"i16": struct.pack(">h", 2**15 - 1), "i32": struct.pack(">i", 2**31 - 1), "uvarint": b"\xff\xff\xff\xff\x0f"}
NEGATIVE = {"i16": struct.pack(">h", -2), "i32": struct.pack(">i", -2)}

st.register_type_strategy(Records, st.binary(max_size=40))


@pytest.fixture(params=CHECKERS, ids=[checker.name for checker in CHECKERS])
def checker(request) -> frame_check.FrameChecker:
    return request.param


def outcome(checker: frame_check.FrameChecker, program: frame_check.Program, frame: bytes, items_max: int = ITEMS_MAX):
    try:
        return checker.check(program, frame, 0, items_max)
    except ValueError as error:
        return f"refused: {error}"


def request_program(api_key: int, api_version: int) -> frame_check.Program:
    return codec._request_codec(api_key, api_version)[2]


def all_versions():
    return [(api_key, version) for api_key, (low, high) in SUPPORTED_VERSIONS.items() for version in range(low, high + 1)]


def test_compiled_checker_is_loaded_where_it_could_be_built():
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None or not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        pytest.skip("no C compiler or Python headers: the pure-Python checker is the one expected")
    assert COMPILED is not None, "a C toolchain is here but replog.net._framecheck was not built"
    assert frame_check.CHECKER is COMPILED


# -- the probes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("frame", [METADATA_V9_HUGE_ARRAY, METADATA_V1_HUGE_ARRAY], ids=["v9-19-bytes", "v1-18-bytes"])
def test_a_count_the_frame_cannot_hold_is_refused(checker, frame):
    assert "refused: count" in outcome(checker, request_program(*struct.unpack_from(">hh", frame)), frame)


DECODE_UNDER_A_GIB = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from replog.net import codec
try:
    codec.decode_request(bytes.fromhex(sys.argv[1]))
except codec.FrameError as error:
    print("refused:", error)
"""


@pytest.mark.parametrize("frame", [METADATA_V9_HUGE_ARRAY, METADATA_V1_HUGE_ARRAY], ids=["v9-19-bytes", "v1-18-bytes"])
def test_decoding_the_probes_allocates_nothing_big(frame):
    # In a process of its own under a 1 GiB address space: kio's reservation of 16 or 34 GB
    # would abort it (SIGABRT, which nothing in Python can catch).
    done = subprocess.run([sys.executable, "-c", DECODE_UNDER_A_GIB, frame.hex()], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("refused: malformed api 3"), done.stdout


# -- every length position of every seed -------------------------------------------------------------

_KINDS = {"int16": "i16", "int32": "i32", "uvarint": "uvarint"}


def seed_cases() -> list[tuple[str, bytes, int, int, str]]:
    """(id, frame, position, width, kind) for every length, count and tagged-field size of a valid request
    of every (api, version), found by the fuzzer's map of kio's encoding (not by the check's
    programs)."""
    cases = []
    for seed in all_seeds(Names()):
        frame = seed.frame[SIZE_PREFIX_BYTES:]
        for length in map_frame(seed.api_key, seed.version, seed.frame).lengths:
            position = length.offset - SIZE_PREFIX_BYTES
            cases.append((f"api{seed.api_key}v{seed.version}@{position}", frame, position, length.width,
                          _KINDS[length.form]))
    return cases


SEED_CASES = seed_cases()
SEED_FRAMES = sorted({frame for _, frame, _, _, _ in SEED_CASES})


def with_length(frame: bytes, position: int, width: int, encoded: bytes) -> bytes:
    return frame[:position] + encoded + frame[position + width:]


def test_the_seeds_have_length_positions_of_every_kind():
    assert {kind for *_, kind in SEED_CASES} == {"i16", "i32", "uvarint"}
    assert len(SEED_CASES) > 250


@pytest.mark.parametrize("case", SEED_CASES, ids=[case[0] for case in SEED_CASES])
def test_an_inflated_length_at_every_position_of_every_seed_is_refused(checker, case):
    _, frame, position, width, kind = case
    program = request_program(*struct.unpack_from(">hh", frame))
    assert isinstance(outcome(checker, program, frame), int)
    assert outcome(checker, program, with_length(frame, position, width, INFLATED[kind])).startswith("refused: ")
    if kind in NEGATIVE:
        assert outcome(checker, program, with_length(frame, position, width, NEGATIVE[kind])).startswith("refused: negative")


# -- valid messages of every (api, version) -----------------------------------------------------------


def encode(schema: type, header, body) -> bytes:
    out = io.BytesIO()
    entity_writer(schema.__header_schema__)(out, header)
    entity_writer(schema)(out, body)
    return out.getvalue()


def request_headers(api_key: int, version: int):
    schema = codec.request_schema(api_key, version).__header_schema__
    return st.builds(schema, request_api_key=st.just(i16(api_key)), request_api_version=st.just(i16(version)),
                     correlation_id=st.integers(-(2**31), 2**31 - 1).map(i32), client_id=st.none() | st.text(max_size=20))


@pytest.mark.parametrize("api_key,version", all_versions())
def test_valid_requests_pass_and_decode_as_kio_decodes_them(api_key, version):
    schema = codec.request_schema(api_key, version)

    @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(header=request_headers(api_key, version), body=st.from_type(schema))
    def valid(header, body):
        frame = encode(schema, header, body)
        program = request_program(api_key, version)
        assert [outcome(checker, program, frame) for checker in CHECKERS] == [len(frame)] * len(CHECKERS)
        read_header, read_body, _ = codec._request_codec(api_key, version)
        kio_header, header_size = read_header(frame, 0)
        decoder = codec.BODY_DECODERS.get(api_key)
        try:
            before = decoder(frame, header_size, version) if decoder else read_body(frame, header_size)[0]
        except ValueError:  # kio writes timedeltas near the type's limits that it cannot read back
            with pytest.raises(codec.FrameError):
                codec.decode_request(frame)
            return
        decoded = codec.decode_request(memoryview(bytearray(frame)))
        assert (decoded.correlation_id, decoded.client_id, decoded.body) == (kio_header.correlation_id, kio_header.client_id, before)

    valid()


@pytest.mark.parametrize("api_key,version", all_versions())
def test_valid_responses_pass_and_decode_as_kio_decodes_them(api_key, version):
    schema = codec.response_schema(api_key, version)
    header_schema = schema.__header_schema__

    @settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(correlation_id=st.integers(-(2**31), 2**31 - 1), body=st.from_type(schema))
    def valid(correlation_id, body):
        if api_key == ApiKey.API_VERSIONS and body.error_code == ErrorCode.unsupported_version:
            return  # read as v0 whatever was asked: its own test below
        frame = encode(schema, header_schema(correlation_id=i32(correlation_id)), body)
        program = codec.response_program(api_key, version)
        assert [outcome(checker, program, frame, codec.RESPONSE_ITEMS_MAX) for checker in CHECKERS] == [len(frame)] * len(CHECKERS)
        header_size = entity_reader(header_schema)(frame, 0)[1]
        try:
            before = entity_reader(schema)(frame, header_size)[0]
        except ValueError:  # kio writes timedeltas near the type's limits that it cannot read back
            with pytest.raises(codec.FrameError):
                codec.decode_response(api_key, version, frame)
            return
        decoded_correlation_id, decoded = codec.decode_response(api_key, version, frame)
        # Field by field: a response may be read with a schema of replog's that takes Kafka's
        # nulls where kio's does not (DescribeTransactions' start time).
        assert (decoded_correlation_id, asdict(decoded)) == (correlation_id, asdict(before))

    valid()


# -- the two implementations agree ---------------------------------------------------------------------


@st.composite
def mutated_requests(draw) -> bytes:
    frame = bytearray(draw(st.sampled_from(SEED_FRAMES)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "flip", "flip", "truncate", "extend"]))
        if kind == "flip" and len(frame) > 8:
            frame[draw(st.integers(8, len(frame) - 1))] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            frame = frame[:draw(st.integers(8, len(frame)))]
        else:
            frame += draw(st.binary(min_size=1, max_size=16))
    return bytes(frame)


@pytest.mark.skipif(COMPILED is None, reason="the _framecheck extension is not built")
@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(frame=mutated_requests(), items_max=st.sampled_from([ITEMS_MAX, 3, 0]))
def test_both_implementations_refuse_the_same_frames_with_the_same_messages(frame, items_max):
    program = request_program(*struct.unpack_from(">hh", frame))
    assert outcome(COMPILED, program, frame, items_max) == outcome(PURE_PYTHON, program, frame, items_max)


# -- the item budget ------------------------------------------------------------------------------------


def metadata_v1(topic_count: int) -> bytes:
    return struct.pack(">hhih", ApiKey.METADATA, 1, 7, -1) + struct.pack(">i", topic_count) + b"\0\1a" * topic_count


def test_a_request_of_items_max_items_passes_and_one_more_is_refused(checker):
    program = request_program(ApiKey.METADATA, 1)
    assert outcome(checker, program, metadata_v1(ITEMS_MAX)) == len(metadata_v1(ITEMS_MAX))
    assert outcome(checker, program, metadata_v1(ITEMS_MAX + 1)) == f"refused: more than {ITEMS_MAX} items at byte 10"


def test_items_are_counted_at_every_depth(checker):
    # ListOffsets v1: 2 topics of 2 partitions each hold 6 items.
    body = codec.build(codec.request_schema(ApiKey.LIST_OFFSETS, 1), {"replica_id": -1, "topics": [
        {"name": name, "partitions": [{"partition_index": index, "timestamp": -1} for index in range(2)]} for name in "ab"]})
    frame = codec.encode_request(ApiKey.LIST_OFFSETS, 1, 7, None, body)[4:]
    program = request_program(ApiKey.LIST_OFFSETS, 1)
    assert outcome(checker, program, frame, items_max=6) == len(frame)
    assert outcome(checker, program, frame, items_max=5).startswith("refused: more than 5 items")


@pytest.mark.parametrize("api_key,version,values", [
    (ApiKey.FETCH, 13, {"replica_id": 1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "", "topics": [
                            {"topic_id": uuid.uuid4(), "partitions": [
                                {"partition": index, "current_leader_epoch": 1, "fetch_offset": 0, "last_fetched_epoch": 1,
                                 "log_start_offset": 0, "partition_max_bytes": 1 << 20} for index in range(100)]}
                            for _ in range(100)]}),
    (ApiKey.METADATA, 12, {"topics": [{"name": f"topic-{index}", "topic_id": None} for index in range(10_000)],
                           "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}),
    (ApiKey.OFFSET_COMMIT, 8, {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m", "group_instance_id": None,
                               "topics": [{"name": f"topic-{index}", "partitions": [
                                   {"partition_index": partition, "committed_offset": 1, "committed_leader_epoch": 1,
                                    "committed_metadata": ""} for partition in range(10)]} for index in range(1_000)]}),
], ids=["follower-fetch-10000-partitions", "metadata-10000-topics", "offset-commit-10000-partitions"])
def test_real_workloads_pass_well_within_the_budget(api_key, version, values):
    frame = codec.encode_request(api_key, version, 7, None, codec.build(codec.request_schema(api_key, version), values))[4:]
    for checker in CHECKERS:
        assert outcome(checker, request_program(api_key, version), frame, items_max=ITEMS_MAX // 3) == len(frame)


def test_a_produce_request_past_the_budget_is_refused_before_its_own_reader():
    partitions = struct.pack(">i", ITEMS_MAX) + struct.pack(">ii", 0, -1) * ITEMS_MAX  # index, null records
    frame = (struct.pack(">hhih", ApiKey.PRODUCE, 3, 7, -1) + struct.pack(">hhi", -1, 1, 1000)
             + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + partitions)
    with pytest.raises(codec.FrameError, match=f"more than {ITEMS_MAX} items"):
        codec.decode_request(frame)


def test_decode_request_refuses_a_metadata_request_past_the_budget():
    with pytest.raises(codec.FrameError, match=f"more than {ITEMS_MAX} items"):
        codec.decode_request(metadata_v1(ITEMS_MAX + 1))
    assert len(codec.decode_request(metadata_v1(1000)).body.topics) == 1000


# -- tagged fields and nullable structs ---------------------------------------------------------------


def fetch_v12(tags: bytes) -> bytes:
    """A Fetch v12 request naming nothing, with `tags` as its body's tagged fields."""
    return (struct.pack(">hhih", ApiKey.FETCH, 12, 7, -1) + b"\0" + struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1)
            + b"\1\1\1" + tags)


def test_a_known_tagged_field_must_fill_its_declared_size(checker):
    program = request_program(ApiKey.FETCH, 12)
    cluster_id = b"\4abc"  # tag 0 of FetchRequest v12: a compact string
    assert outcome(checker, program, fetch_v12(b"\1\0\4" + cluster_id)) == len(fetch_v12(b"\1\0\4" + cluster_id))
    assert outcome(checker, program, fetch_v12(b"\1\0\5" + cluster_id + b"x")).startswith("refused: tagged field 0 at byte 40 declares 5")
    assert outcome(checker, program, fetch_v12(b"\1\0\x7f" + cluster_id)).startswith("refused: tagged field of 127 bytes")


def test_unknown_tagged_fields_are_skipped_by_their_size_and_count_as_items(checker):
    program = request_program(ApiKey.FETCH, 12)
    frame = fetch_v12(b"\2\5\3xyz\6\0")
    assert outcome(checker, program, frame) == len(frame)
    assert outcome(checker, program, frame, items_max=1).startswith("refused: more than 1 items")
    assert outcome(checker, program, fetch_v12(b"\xff\xff\xff\xff\x0f")).startswith("refused: 4294967295 tagged fields")


class _Nested:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(-1)
    __header_schema__: ClassVar = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Inner(_Nested):
    value: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class WithNullableStruct(_Nested):
    __type__: ClassVar = EntityType.response
    inner: Inner | None = field(metadata={"kafka_type": "struct"})
    after: i8 = field(metadata={"kafka_type": "int8"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Empty(_Nested):
    __flexible__: ClassVar[bool] = False


def test_a_nullable_struct_is_marked_minus_one_or_one_as_kio_reads_it(checker):
    program = frame_check.compile_message(Empty, WithNullableStruct)
    for entity in (WithNullableStruct(inner=None, after=i8(3)), WithNullableStruct(inner=Inner(value=i32(9)), after=i8(3))):
        out = io.BytesIO()
        entity_writer(WithNullableStruct)(out, entity)
        frame = out.getvalue()
        assert frame[0] == (0xFF if entity.inner is None else 1)
        assert outcome(checker, program, frame) == len(frame)
        assert entity_reader(WithNullableStruct)(frame, 0) == (entity, len(frame))
    assert outcome(checker, program, b"\x02" + b"\0" * 8) == "refused: nullable struct marker 2 at byte 0"


# -- responses -----------------------------------------------------------------------------------------


def test_a_response_claiming_more_than_it_holds_is_a_frame_error():
    frame = struct.pack(">i", 7) + struct.pack(">i", 0) + struct.pack(">i", 2**31 - 1)  # Metadata v3: brokers
    with pytest.raises(codec.FrameError, match="count 2147483647"):
        codec.decode_response(ApiKey.METADATA, 3, frame)


def test_an_api_versions_refusal_is_read_as_version_0_whatever_was_asked():
    body = codec.build(codec.response_schema(ApiKey.API_VERSIONS, 0), {
        "error_code": ErrorCode.unsupported_version, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]})
    frame = b"".join(codec.encode_response(ApiKey.API_VERSIONS, 0, 5, body))[4:]
    correlation_id, read = codec.decode_response(ApiKey.API_VERSIONS, 4, frame)
    assert (correlation_id, read.error_code, read.api_keys[0].max_version) == (5, ErrorCode.unsupported_version, 3)


def test_a_fetch_response_past_the_budget_is_a_frame_error():
    from replog.net.fetch_decoding import decode_fetch_response

    partition = struct.pack(">ihqqq", 0, 0, 0, 0, 0) + struct.pack(">i", 0) + struct.pack(">i", -1)  # v5: no aborted, null records
    topic = struct.pack(">h", 1) + b"t" + struct.pack(">i", ITEMS_MAX) + partition * ITEMS_MAX
    frame = struct.pack(">iii", 7, 0, 1) + topic
    with pytest.raises(codec.FrameError, match=f"more than {ITEMS_MAX} items"):
        decode_fetch_response(5, frame)


# -- the hand-read bodies' tagged fields ------------------------------------------------------------------


def test_a_hand_read_body_skips_tagged_fields_by_their_count():
    reader = codec.WireReader(b"\2\0\2ab\7\0" + struct.pack(">i", 42), 0, flexible=True)
    reader.tagged_fields()
    assert reader.fixed(struct.Struct(">i")) == 42


def test_a_hand_read_tagged_field_count_the_frame_cannot_hold_is_refused():
    with pytest.raises(ValueError, match="tagged fields"):
        codec.WireReader(b"\x7f\0\0", 0, flexible=True).tagged_fields()

