"""`replog cluster state-changes` as an operator runs it: real `replog` processes through both
doors against three broker processes over a real ZooKeeper, which the module's tests share
(each test works on topics of its own; one stops a broker and brings it back)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.support.polling import wait_until
from tests.cli.test_topics_cli import door  # noqa: F401 (the fixture, over this module's cluster)
from tests.cli.test_topics_cli import SETTLE_S, one_line_error, replog, running_cluster, settled, succeeded, unique

BROKERS = 3
AWAY = 2


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    yield from running_cluster(zookeeper_server, tmp_path_factory.mktemp("state-changes-cli"), BROKERS)


def state_changes(door: list[str], *args: str) -> dict:
    return json.loads(succeeded(replog("cluster", "state-changes", *args, "--output", "json", *door)).stdout)


def requests_of(document: dict, topic: str, request_type: str) -> dict[tuple[int, int], dict]:
    """The document's requests of that type for the topic, by (partition, target broker)."""
    return {(request["partition"], request["to"]): request for request in document["requests"]
            if request["topic"] == topic and request["type"] == request_type}


def test_a_created_topics_start_replicas_are_completed_on_every_replica(door):
    name = unique("created")
    succeeded(replog("topics", "create", name, "--partitions", "2", "--replication-factor", str(BROKERS), *door))

    def all_completed() -> dict | None:
        found = requests_of(state_changes(door, "--topic", name), name, "start-replica")
        return found if len(found) == 2 * BROKERS and all(r["state"] == "completed" for r in found.values()) else None

    found = wait_until(all_completed, f"every start-replica of {name} completed", SETTLE_S)
    assert set(found) == {(partition, broker) for partition in range(2) for broker in range(BROKERS)}
    for request in found.values():
        # An admin command's request: its sender has no ring, so when it was requested is unknown.
        assert (request["from"], request["epoch"], request["requested"]["at_ms"]) == ("admin", -1, None)
        assert request["received"]["broker"] == request["outcome"]["broker"] == request["to"]
        assert request["received"]["at_ms"] <= request["outcome"]["at_ms"]
        assert not request["queued"]

    table = succeeded(replog("cluster", "state-changes", "--topic", name, "--partition", "1", *door)).stdout
    rows = [line.split() for line in table.splitlines() if f"{name}-1" in line]
    assert sorted(row[4] for row in rows) == [str(broker) for broker in range(BROKERS)], table
    assert all(row[:4] == ["start", f"{name}-1", "-1", "admin"] and row[6] == "unknown" and row[8] == "completed"
               for row in rows), table
    assert max(len(line) for line in table.splitlines()) <= 80, table
    assert f"{name}-0" not in table


def test_a_request_to_a_broker_that_is_down_is_requested_and_not_received(cluster, door):
    name = unique("deleted")
    succeeded(replog("topics", "create", name, "--partitions", "1", "--replication-factor", str(BROKERS), *door))
    settled(door, name)
    away = cluster.brokers[AWAY]
    away.stop()
    try:
        succeeded(replog("topics", "delete", name, *door))
        document = state_changes(door, "--topic", name)
        closing = requests_of(document, name, "close-replica")
        assert (closing[0, AWAY]["state"], closing[0, AWAY]["queued"], closing[0, AWAY]["received"]) == ("requested", True, None)
        # The delete waited for the running brokers to consume theirs.
        assert all(closing[0, broker]["state"] == "completed" for broker in range(BROKERS) if broker != AWAY)
        assert [down["broker"] for down in document["unreachable"]] == [AWAY]

        done = succeeded(replog("cluster", "state-changes", "--topic", name, *door))
        assert done.stderr == ""
        assert [line for line in done.stdout.splitlines() if "unreachable" in line] == [
            f"broker {AWAY} unreachable (down: not registered in the store): its events are not shown"]
        row = next(line.split() for line in done.stdout.splitlines() if line.split()[:1] == ["close"] and line.split()[4] == str(AWAY))
        assert row[6:] == ["queued", "-", "-"], done.stdout
    finally:
        away.restart()  # drains its queue before it serves

    def completed_away() -> bool:
        request = requests_of(state_changes(door, "--topic", name), name, "close-replica").get((0, AWAY))
        return request is not None and request["state"] == "completed" and not request["queued"]

    wait_until(completed_away, f"broker {AWAY}'s close-replica of {name} completed once it is back", SETTLE_S)


def test_follow_prints_each_new_step_until_interrupted(door):
    name = unique("followed")
    clean = {variable: value for variable, value in os.environ.items() if not variable.startswith("REPLOG_")}
    follower = subprocess.Popen([sys.executable, "-m", "replog", "cluster", "state-changes", "--follow", "--topic", name,
                                 "--output", "json", *door], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(follower.stdout), daemon=True)
    reader.start()
    try:
        succeeded(replog("topics", "create", name, "--partitions", "1", "--replication-factor", str(BROKERS), *door))

        def completed_everywhere() -> bool:
            updates = [json.loads(line) for line in list(lines)]
            return {update["recorded_by"] for update in updates if update["update"] == "event"
                    and update["kind"] == "completed" and update["topic"] == name} == set(range(BROKERS))

        wait_until(completed_everywhere, f"--follow printing the completions of {name}'s start-replicas", SETTLE_S)
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=SETTLE_S) == 0
        assert follower.stderr.read() == ""
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
        reader.join(timeout=SETTLE_S)


def test_bad_input_is_one_line(door):
    assert "does not exist" in one_line_error(replog("cluster", "state-changes", "--topic", unique("never"), *door), 1)
    assert "--partition needs --topic" in one_line_error(replog("cluster", "state-changes", "--partition", "0", *door), 2)
    assert "is illegal" in one_line_error(replog("cluster", "state-changes", "--topic", "bad/name", *door), 1)
