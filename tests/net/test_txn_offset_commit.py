"""TxnOffsetCommit and OffsetFetch's require_stable at the handlers, against a recording group
coordinator and transaction verifier: what the handler asks the coordinator, how it verifies
the group's partition with the transaction coordinator (KIP-890), and the answers per version."""

from __future__ import annotations

import types

from kio.schema.errors import ErrorCode

from replog.groups import OFFSETS_TOPIC
from replog.groups.records import OffsetValue
from replog.net.codec import ApiKey
from tests.net.test_authorization_table import ask

GROUP_PARTITION = 7


class RecordingGroups:
    def __init__(self, answer: ErrorCode = ErrorCode.none):
        self.answer = answer
        self.calls: list[tuple] = []
        self.verified: list[int] = []
        self.committed = {("t", 0): OffsetValue(5, 2, "m", 0), ("t", 1): OffsetValue(6, 2, "", 0)}
        self.unstable = {("t", 1)}

    def partition_of(self, group_id: str) -> int:
        return GROUP_PARTITION

    async def commit_transactional(self, group_id, producer_id, producer_epoch, member_id, group_instance_id,
                                   generation, commits, verify):
        self.calls.append((group_id, producer_id, producer_epoch, member_id, group_instance_id, generation,
                           [(commit.topic, commit.partition, commit.offset, commit.leader_epoch) for commit in commits]))
        if verify is not None:
            self.verified.append(await verify())
        return [self.answer] * len(commits)

    def fetch(self, group_id, partitions):
        if partitions is None:
            return ErrorCode.none, dict(self.committed)
        return ErrorCode.none, {key: self.committed.get(key) for key in partitions}

    def unstable_offsets(self, group_id):
        return set(self.unstable)


class RecordingVerifier:
    def __init__(self, error: ErrorCode):
        self.error = error
        self.asked: list[tuple] = []

    async def verify(self, transactional_id, producer_id, producer_epoch, partitions, *, abortable_known):
        self.asked.append((transactional_id, producer_id, producer_epoch, list(partitions), abortable_known))
        return {partition: self.error for partition in partitions if self.error != ErrorCode.none}


def services(groups: RecordingGroups, verifier: RecordingVerifier | None):
    return types.SimpleNamespace(authorizer=None, groups=groups, transaction_verifier=verifier,
                                 metadata=types.SimpleNamespace(topics={"t": {0: object(), 1: object()}}))


def commit_request(version: int) -> dict:
    values = {"transactional_id": "tx", "group_id": "g", "producer_id": 42, "producer_epoch": 3, "topics": [
        {"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 4, "committed_metadata": None},
            {"partition_index": 9, "committed_offset": 11, "committed_leader_epoch": 4, "committed_metadata": ""}]}]}
    if version >= 3:
        values |= {"generation_id": 5, "member_id": "member-1", "group_instance_id": "instance-1"}
    return values


def errors(answer) -> dict[tuple[str, int], int]:
    return {(topic.name, partition.partition_index): partition.error_code
            for topic in answer.topics for partition in topic.partitions}


async def test_the_commit_names_the_member_and_generation_and_verifies_the_groups_partition():
    groups, verifier = RecordingGroups(), RecordingVerifier(ErrorCode.none)
    answer = await ask(services(groups, verifier), ApiKey.TXN_OFFSET_COMMIT, 4, commit_request(4), "User:p")
    assert errors(answer) == {("t", 0): ErrorCode.none, ("t", 9): ErrorCode.unknown_topic_or_partition}
    assert groups.calls == [("g", 42, 3, "member-1", "instance-1", 5, [("t", 0, 10, 4)])]
    assert verifier.asked == [("tx", 42, 3, [(OFFSETS_TOPIC, GROUP_PARTITION)], True)]
    assert groups.verified == [ErrorCode.none]


async def test_verification_errors_reach_the_coordinator_and_versions_before_4_know_no_abortable():
    groups, verifier = RecordingGroups(), RecordingVerifier(ErrorCode.invalid_txn_state)
    await ask(services(groups, verifier), ApiKey.TXN_OFFSET_COMMIT, 3, commit_request(3), "User:p")
    assert verifier.asked[0][-1] is False
    assert groups.verified == [ErrorCode.invalid_txn_state]
    groups = RecordingGroups()
    await ask(services(groups, None), ApiKey.TXN_OFFSET_COMMIT, 4, commit_request(4), "User:p")  # verification off
    assert groups.calls and groups.verified == []


async def test_old_clients_get_coordinator_not_available_for_a_load_in_progress():
    for version, expected in ((1, ErrorCode.coordinator_not_available), (2, ErrorCode.coordinator_load_in_progress)):
        groups = RecordingGroups(ErrorCode.coordinator_load_in_progress)
        answer = await ask(services(groups, None), ApiKey.TXN_OFFSET_COMMIT, version, commit_request(version), "User:p")
        assert errors(answer)[("t", 0)] == expected
        assert groups.calls[0][3:6] == ("", None, -1)  # no member before v3


def fetch_request(version: int, partitions: list[int] | None, require_stable: bool) -> dict:
    topics = None if partitions is None else [{"name": "t", "partition_indexes": partitions}]
    return {"groups": [{"group_id": "g", "topics": topics}], "require_stable": require_stable} if version >= 8 \
        else {"group_id": "g", "topics": topics, "require_stable": require_stable}


def fetched(answer) -> dict[tuple[str, int], tuple[int, int]]:
    topics = answer.groups[0].topics if hasattr(answer, "groups") else answer.topics
    return {(topic.name, partition.partition_index): (partition.committed_offset, partition.error_code)
            for topic in topics for partition in topic.partitions}


async def test_require_stable_answers_unstable_for_offsets_pending_in_a_transaction():
    for version in (7, 8):
        for partitions in ([0, 1], None):
            stable = await ask(services(RecordingGroups(), None), ApiKey.OFFSET_FETCH, version,
                               fetch_request(version, partitions, True), "User:p")
            assert fetched(stable) == {("t", 0): (5, ErrorCode.none), ("t", 1): (-1, ErrorCode.unstable_offset_commit)}
            latest = await ask(services(RecordingGroups(), None), ApiKey.OFFSET_FETCH, version,
                               fetch_request(version, partitions, False), "User:p")
            assert fetched(latest) == {("t", 0): (5, ErrorCode.none), ("t", 1): (6, ErrorCode.none)}
