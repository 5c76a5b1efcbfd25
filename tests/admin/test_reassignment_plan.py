"""Plan files in kafka-reassign-partitions' JSON formats: exact output, round trips, refusals."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.admin import (
    InvalidReplicaAssignment,
    InvalidTopic,
    format_reassignment,
    format_topics_to_move,
    parse_reassignment,
    parse_topics_to_move,
)


def test_reassignment_is_written_as_kafka_writes_it():
    text = format_reassignment({("foo", 1): [2, 3], ("bar", 0): (1,), ("foo", 0): [1, 2]})
    assert text == (
        '{"version":1,"partitions":['
        '{"topic":"bar","partition":0,"replicas":[1],"log_dirs":["any"]},'
        '{"topic":"foo","partition":0,"replicas":[1,2],"log_dirs":["any","any"]},'
        '{"topic":"foo","partition":1,"replicas":[2,3],"log_dirs":["any","any"]}]}'
    )


def test_topics_to_move_are_written_as_kafka_reads_them():
    assert format_topics_to_move(["foo", "bar", "foo"]) == '{"version":1,"topics":[{"topic":"bar"},{"topic":"foo"}]}'


def test_kafkas_own_files_are_read():
    # Laid out as the examples of kafka-reassign-partitions' --help (whose log dirs, named
    # directories, replog refuses: here "any").
    reassignment = (
        '{"partitions":\n\t[{"topic": "foo",\n\t  "partition": 1,\n\t  "replicas": [1,2,3],\n'
        '\t  "log_dirs": ["any","any","any"] }],\n"version":1\n}'
    )
    assert parse_reassignment(reassignment) == {("foo", 1): (1, 2, 3)}
    topics = '{"topics":\n\t[{"topic": "foo"},{"topic": "foo1"}],\n"version":1\n}'
    assert parse_topics_to_move(topics) == ["foo", "foo1"]


def test_version_defaults_to_1_and_log_dirs_may_be_left_out():
    assert parse_reassignment('{"partitions":[{"topic":"foo","partition":0,"replicas":[3,1]}]}') == {("foo", 0): (3, 1)}
    assert parse_topics_to_move('{"topics":[{"topic":"foo","extra":true}]}') == ["foo"]


def entry(**fields) -> str:
    base = {"topic": "foo", "partition": 0, "replicas": [1, 2]}
    return json.dumps({"version": 1, "partitions": [{"topic": "bar", "partition": 0, "replicas": [1]}, {**base, **fields}]})


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("{", "reassignment JSON is not valid JSON: Expecting property name"),
        ("[1]", r'reassignment JSON must be an object such as \{"version":1,"partitions":\[...\]\}, got \[1\]'),
        ('{"version":2,"partitions":[]}', r"reassignment JSON: unsupported version 2 \(only 1 is known\)"),
        ('{"version":true,"partitions":[]}', "unsupported version true"),
        ('{"version":1}', 'reassignment JSON names no partitions: "partitions" must be a non-empty list, got null'),
        ('{"version":1,"partitions":[]}', "names no partitions"),
        ('{"version":1,"partitions":[7]}', r"reassignment JSON: partitions\[0\]: must be an object, got 7"),
        (entry(topic=""), r'partitions\[1\]: topic must be a non-empty string, got ""'),
        (entry(partition=-1), r"partitions\[1\]: partition must be a non-negative integer, got -1"),
        (entry(partition="0"), r'partition must be a non-negative integer, got "0"'),
        (entry(topic="bar"), r"partitions\[1\] \(bar-0\): the partition is listed twice \(first at partitions\[0\]\)"),
        (entry(replicas=[]), r"partitions\[1\] \(foo-0\): replicas must be a non-empty list of broker ids, got \[\]"),
        (entry(replicas=[1, -2]), r"replica -2 in \[1, -2\] is not a non-negative broker id"),
        (entry(replicas=[1, True]), r"replica true in \[1, true\] is not a non-negative broker id"),
        (entry(replicas=[3, 1, 3]), r"partitions\[1\] \(foo-0\): replicas \[3, 1, 3\] name broker 3 twice"),
        (entry(log_dirs=["any"]), r'log_dirs \["any"\] must list one entry per replica \(2\)'),
        (entry(log_dirs=["any", "/data/b"]), r'log_dirs "/data/b" is not supported: replog keeps one log directory per broker; use "any"'),
    ],
)
def test_bad_reassignment_files_are_refused_naming_the_entry(text, complaint):
    with pytest.raises(InvalidReplicaAssignment, match=complaint) as refused:
        parse_reassignment(text)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "text, complaint",
    [
        ('{"version":3,"topics":[{"topic":"foo"}]}', "topics-to-move JSON: unsupported version 3"),
        ('{"version":1,"topics":[]}', "topics-to-move JSON names no topics"),
        ('{"version":1,"topics":[{"name":"foo"}]}', r"topics-to-move JSON: topics\[0\]: topic must be a non-empty string, got null"),
        ('{"version":1,"topics":["foo"]}', r'topics\[0\]: must be an object, got "foo"'),
        ('{"version":1,"topics":[{"topic":"foo"},{"topic":"foo"}]}', r"topics\[1\] \(foo\): the topic is listed twice \(first at topics\[0\]\)"),
    ],
)
def test_bad_topics_files_are_refused_naming_the_entry(text, complaint):
    with pytest.raises(InvalidTopic, match=complaint):
        parse_topics_to_move(text)


assignments = st.dictionaries(
    st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 50)),
    st.lists(st.integers(0, 100), min_size=1, max_size=4, unique=True).map(tuple),
    min_size=1,
)


@given(assignments)
def test_reassignment_round_trips(assignment):
    text = format_reassignment(assignment)
    assert parse_reassignment(text) == assignment
    assert format_reassignment(dict(reversed(assignment.items()))) == text


@given(st.lists(st.text(min_size=1, max_size=5), min_size=1, unique=True))
def test_topics_round_trip(topics):
    assert parse_topics_to_move(format_topics_to_move(topics)) == sorted(topics)
