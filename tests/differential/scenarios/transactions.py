"""The transaction coordinator's answers: a transaction begun, refused and described; a zombie
producer fenced with the error its request version knows; verify_only."""

from __future__ import annotations

from replog.net.codec import ApiKey

from tests.support.polling import wait_until

from ..protocol import TRANSACTION_KEY, coordinated, create_topic
from ..targets import TOPIC_READY_TIMEOUT_S, Target
from .registry import scenario

TRANSACTION_TIMEOUT_MS = 60_000


def _init(target: Target, transactional_id: str) -> dict:
    return coordinated(target, transactional_id, TRANSACTION_KEY, lambda: target.request(ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": transactional_id, "transaction_timeout": TRANSACTION_TIMEOUT_MS, "producer_id": -1,
        "producer_epoch": -1}))


def _add(target: Target, transactional_id: str, ids: dict, topics: dict[str, list[int]], version: int = 3) -> dict:
    answer = target.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": ids["producer_id"],
        "v3_and_below_producer_epoch": ids["producer_epoch"],
        "v3_and_below_topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]})
    return {f"{topic['name']}-{partition['partition_index']}": partition["partition_error_code"]
            for topic in answer["results_by_topic_v3_and_below"] for partition in topic["results_by_partition"]}


def _end(target: Target, transactional_id: str, ids: dict, committed: bool, version: int = 3) -> str:
    return target.request(ApiKey.END_TXN, version, {
        "transactional_id": transactional_id, "producer_id": ids["producer_id"],
        "producer_epoch": ids["producer_epoch"], "committed": committed})["error_code"]


@scenario
def transaction_begun_refused_and_described(target: Target) -> dict:
    topic, transactional_id = "differential-transaction", "differential-transaction"
    create_topic(target, topic, partitions=2)
    ids = _init(target, transactional_id)
    result = {"init": ids["error_code"], "epoch": ids["producer_epoch"],
              "end_of_nothing": _end(target, transactional_id, ids, committed=True),
              "unknown_partition": _add(target, transactional_id, ids, {topic: [0, 7]}),
              "internal_topic": _add(target, transactional_id, ids, {"__consumer_offsets": [0]}),
              "added": _add(target, transactional_id, ids, {topic: [1, 0]})}
    result["offsets_added"] = target.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": transactional_id, "producer_id": ids["producer_id"], "producer_epoch": ids["producer_epoch"],
        "group_id": "differential-transaction-group"})["error_code"]
    (state,) = target.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]})["transaction_states"]
    result["described"] = {"error_code": state["error_code"], "state": state["transaction_state"],
                           "timeout": state["transaction_timeout"], "epoch": state["producer_epoch"],
                           "same_producer_id": state["producer_id"] == ids["producer_id"],
                           "topics": sorted((item["topic"], sorted(item["partitions"])) for item in state["topics"]
                                            if item["topic"] == topic)}
    listed = target.request(ApiKey.LIST_TRANSACTIONS, 1, {
        "state_filters": ["Ongoing", "NoSuchState"], "producer_id_filters": [ids["producer_id"]], "duration_filter": -1})
    result["listed"] = {"error_code": listed["error_code"], "unknown": listed["unknown_state_filters"],
                        "states": [(item["transactional_id"], item["transaction_state"])
                                   for item in listed["transaction_states"]]}
    verified = target.request(ApiKey.ADD_PARTITIONS_TO_TXN, 5, {"transactions": [
        {"transactional_id": transactional_id, "producer_id": ids["producer_id"],
         "producer_epoch": ids["producer_epoch"], "verify_only": True, "topics": [{"name": topic, "partitions": [0]}]}]})
    result["verified"] = [(item["transactional_id"], [(partition["partition_index"], partition["partition_error_code"])
                                                       for topic_result in item["topic_results"]
                                                       for partition in topic_result["results_by_partition"]])
                          for item in verified["results_by_transaction"]]
    return result


@scenario
def zombie_producer_fenced(target: Target) -> dict:
    topic, transactional_id = "differential-zombie", "differential-zombie"
    create_topic(target, topic)
    zombie = _init(target, transactional_id)
    current = _init(target, transactional_id)
    return {"current_epoch": current["producer_epoch"] - zombie["producer_epoch"],
            "same_producer_id": current["producer_id"] == zombie["producer_id"],
            "add_v3": _add(target, transactional_id, zombie, {topic: [0]}),
            "add_v1": _add(target, transactional_id, zombie, {topic: [0]}, version=1),
            "end_v3": _end(target, transactional_id, zombie, committed=False),
            "end_v1": _end(target, transactional_id, zombie, committed=False, version=1),
            "unknown_id": _end(target, "differential-never-initialised", zombie, committed=False)}


@scenario
def open_transaction_aborted_by_a_new_producer(target: Target) -> dict:
    """InitProducerId with a transaction open aborts it at an epoch no client gets, answering
    CONCURRENT_TRANSACTIONS until the abort's markers are written; the retry gets the epoch after."""
    topic, transactional_id = "differential-new-producer", "differential-new-producer"
    create_topic(target, topic)
    first = _init(target, transactional_id)
    added = _add(target, transactional_id, first, {topic: [0]})

    def init() -> dict:
        return target.request(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": transactional_id, "transaction_timeout": TRANSACTION_TIMEOUT_MS, "producer_id": -1,
            "producer_epoch": -1})

    def ended() -> dict | None:
        answer = init()
        return None if answer["error_code"] == "concurrent_transactions" else answer

    first_answer = init()["error_code"]
    second = wait_until(ended, f"the abort of the open transaction on {target.name}", TOPIC_READY_TIMEOUT_S)
    return {"added": added, "first_answer": first_answer, "last_answer": second["error_code"],
            "epochs_later": second["producer_epoch"] - first["producer_epoch"],
            "same_producer_id": second["producer_id"] == first["producer_id"],
            "old_commits": _end(target, transactional_id, first, committed=True)}
