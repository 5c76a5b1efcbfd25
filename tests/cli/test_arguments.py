"""The operator's text forms have one parser each, with one rule: `key=value` split at the first
'=' with the key stripped; a setting or a broker named twice is refused, never silently
dropped; a record's headers may repeat, as Kafka's do."""

from __future__ import annotations

import pytest

from replog.cli.arguments import broker_ids, key_value_pairs, key_values
from tests.cli.test_cli import replog


def test_headers_keep_every_pair_in_order():
    assert key_value_pairs(["origin=a", " n =1", "origin=b", "empty="]) == [
        ("origin", "a"), ("n", "1"), ("origin", "b"), ("empty", "")]
    for bad in ("novalue", "=1", " =1"):
        with pytest.raises(ValueError, match="takes key=value"):
            key_value_pairs([bad])


def test_a_setting_given_twice_is_refused():
    assert key_values(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ValueError, match="a is given twice"):
        key_values(["a=1", " a=2"])


def test_broker_ids_from_one_text_or_several():
    assert broker_ids(["0,1,2"]) == [0, 1, 2]
    assert broker_ids(["4", "6,5"]) == [4, 6, 5]


@pytest.mark.parametrize("texts, complaint", [
    (["1,1"], "broker 1 is listed twice"),
    (["4", "5,4"], "broker 4 is listed twice"),
    (["1,x"], "'1,x' is not broker ids"),
    (["4,"], "'4,' is not broker ids"),
    ([""], "'' is not broker ids"),
])
def test_broker_ids_refuse_duplicates_and_anything_else(texts, complaint):
    with pytest.raises(ValueError, match=complaint):
        broker_ids(texts)


@pytest.mark.parametrize("args, complaint", [
    (["cluster", "add-brokers", "4", "4", "--dry-run", "--coord", "zk://127.0.0.1:1/none"], "broker 4 is listed twice"),
    (["cluster", "remove-brokers", "1,2,1", "--coord", "zk://127.0.0.1:1/none"], "broker 1 is listed twice"),
    (["broker", "start", "--set", "num.partitions=2", "--set", "num.partitions=3"], "--set num.partitions is given twice"),
    (["produce", "--topic", "t", "--producer-property", "acks=1", "--producer-property", "acks=all"],
     "acks is given twice"),
])
def test_the_commands_refuse_what_is_given_twice_before_connecting(args, complaint):
    done = replog(*args)
    assert done.returncode == 2, done.stderr
    assert complaint in done.stderr
