"""Offsets committed in a transaction (TxnOffsetCommit): pending, answered UNSTABLE to a
require_stable OffsetFetch, until the transaction ends; applied if it commits, not if it aborts;
refused to a generation the group has left (KIP-447), to a zombie producer, and to a producer
whose transaction does not hold the group (KIP-890's verification)."""

from __future__ import annotations

import time

from replog.net.codec import ApiKey

from tests.support.polling import wait_until

from ..protocol import GROUP_KEY, TOPIC_READY_TIMEOUT_S, coordinated, create_topic
from ..targets import Target
from .groups import _stable_member
from .registry import scenario
from .transactions import _end, _init

TXN_OFFSET_COMMIT_VERSION = 3
MARKERS_WAIT_S = 30


def _add_offsets(target: Target, transactional_id: str, ids: dict, group: str) -> str:
    """AddOffsetsToTxn, retried while the last transaction's markers are still being written
    (CONCURRENT_TRANSACTIONS), as producers retry it."""
    deadline = time.monotonic() + MARKERS_WAIT_S
    while True:  # bounded by the deadline
        error = target.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": transactional_id, "producer_id": ids["producer_id"],
            "producer_epoch": ids["producer_epoch"], "group_id": group})["error_code"]
        if error != "concurrent_transactions" or time.monotonic() > deadline:
            return error
        time.sleep(0.05)


def _commit(target: Target, transactional_id: str, ids: dict, group: str, offsets: dict[tuple[str, int], int],
            member: str = "", generation: int = -1, instance: str | None = None,
            version: int = TXN_OFFSET_COMMIT_VERSION) -> dict[str, str]:
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                               "committed_leader_epoch": -1, "committed_metadata": "txn"})
    answer = target.request(ApiKey.TXN_OFFSET_COMMIT, version, {
        "transactional_id": transactional_id, "group_id": group, "producer_id": ids["producer_id"],
        "producer_epoch": ids["producer_epoch"], "generation_id": generation, "member_id": member,
        "group_instance_id": instance,
        "topics": [{"name": topic, "partitions": partitions} for topic, partitions in by_topic.items()]})
    return {f"{topic['name']}-{partition['partition_index']}": partition["error_code"]
            for topic in answer["topics"] for partition in topic["partitions"]}


def _fetched(target: Target, group: str, topic: str, require_stable: bool) -> dict[int, tuple[int, str]]:
    answer = target.request(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "require_stable": require_stable,
                                                     "topics": [{"name": topic, "partition_indexes": [0, 1]}]})
    return {partition["partition_index"]: (partition["committed_offset"], partition["error_code"])
            for partition in answer["topics"][0]["partitions"]}


def _stable(target: Target, group: str, topic: str) -> dict[int, tuple[int, str]]:
    """The group's offsets once no transaction holds them (markers are written after EndTxn's answer)."""
    deadline = time.monotonic() + MARKERS_WAIT_S
    while True:  # bounded by the deadline
        fetched = _fetched(target, group, topic, require_stable=True)
        if all(error != "unstable_offset_commit" for _, error in fetched.values()) or time.monotonic() > deadline:
            return fetched
        time.sleep(0.05)


@scenario
def offsets_committed_in_a_transaction(target: Target) -> dict:
    topic, group, transactional_id = "differential-txn-offsets", "differential-txn-group", "differential-txn-offsets"
    create_topic(target, topic, partitions=2)
    coordinated(target, group, GROUP_KEY, lambda: target.request(ApiKey.OFFSET_FETCH, 7, {
        "group_id": group, "require_stable": False, "topics": []}))
    ids = _init(target, transactional_id)
    result = {"add_offsets": _add_offsets(target, transactional_id, ids, group),
              "commit": _commit(target, transactional_id, ids, group, {(topic, 0): 5, (topic, 9): 5,
                                                                       ("differential-nowhere", 0): 5})}
    result["pending_stable"] = _fetched(target, group, topic, require_stable=True)
    result["pending_latest"] = _fetched(target, group, topic, require_stable=False)
    result["end_commit"] = _end(target, transactional_id, ids, committed=True)
    result["committed"] = _stable(target, group, topic)
    result["add_offsets_again"] = _add_offsets(target, transactional_id, ids, group)
    result["commit_again"] = _commit(target, transactional_id, ids, group, {(topic, 0): 9, (topic, 1): 9})
    result["end_abort"] = _end(target, transactional_id, ids, committed=False)
    result["after_abort"] = _stable(target, group, topic)
    return result


@scenario
def transactional_commits_refused(target: Target) -> dict:
    topic, group = "differential-txn-refused", "differential-txn-refused-group"
    create_topic(target, topic)
    member, generation = _stable_member(target, group, "differential-txn-instance")
    ids = _init(target, "differential-txn-refused")
    added = _add_offsets(target, "differential-txn-refused", ids, group)

    def commit(**options) -> str:
        return _commit(target, "differential-txn-refused", ids, group, {(topic, 0): 1}, **options)[f"{topic}-0"]

    result = {"add_offsets": added,
              "old_generation": commit(member=member, generation=generation - 1, instance="differential-txn-instance"),
              "unknown_member": commit(member="differential-stranger", generation=generation),
              "replaced_instance": commit(member="differential-stranger", generation=generation,
                                          instance="differential-txn-instance"),
              "no_member": commit(),
              "member": commit(member=member, generation=generation, instance="differential-txn-instance")}
    zombie = ids
    _end(target, "differential-txn-refused", ids, committed=False)
    # A new producer of the id, once the abort's markers are written (CONCURRENT_TRANSACTIONS
    # until then, as a client retries it): its epoch fences the old one.
    wait_until(lambda: _init(target, "differential-txn-refused")["error_code"] != "concurrent_transactions",
               f"a new producer of differential-txn-refused on {target.name}", TOPIC_READY_TIMEOUT_S)
    result["zombie"] = _commit(target, "differential-txn-refused", zombie, group, {(topic, 0): 2})
    unverified = _init(target, "differential-txn-no-offsets")  # never added the group to a transaction
    result["not_in_the_transaction"] = _commit(target, "differential-txn-no-offsets", unverified, group, {(topic, 0): 3})
    result["not_in_the_transaction_v4"] = _commit(target, "differential-txn-no-offsets", unverified, group,
                                                  {(topic, 0): 3}, version=4)
    return result
