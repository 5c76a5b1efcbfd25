"""`replog topics` as an operator runs it: real `replog` processes through both doors (--coord on
a real ZooKeeper, --bootstrap-server through confluent-kafka), against three broker processes
that the module's tests share (each test works on topics of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.support.polling import wait_until
from tests.support.cluster import Cluster
from tests.support.servers import unique_root
from tests.cli.test_cli import closed_port

SETTLE_S = 60
COMMANDS = ("create", "delete", "list", "describe", "alter")


def replog(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`replog ARGS`, with no REPLOG_* variable of the test's own environment."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith("REPLOG_")}
    return subprocess.run([sys.executable, "-m", "replog", *args], capture_output=True, text=True, timeout=120,
                          env=clean | (env or {}))


def succeeded(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, f"status {done.returncode}: {done.stderr}"
    return done


def one_line_error(done: subprocess.CompletedProcess, status: int) -> str:
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("replog: "), done.stderr
    return lines[0]


def described(door: list[str], *args: str) -> dict[str, dict]:
    """describe --output json, by topic name."""
    document = json.loads(succeeded(replog("topics", "describe", *args, "--output", "json", *door)).stdout)
    return {topic["name"]: topic for topic in document["topics"]}


def described_when(door: list[str], name: str, condition, what: str) -> dict:
    """The topic's description once `condition(description)` holds. Brokers learn of a change
    from the store a moment apart, and the broker door may ask one that has not yet."""
    def attempt() -> dict | None:
        done = replog("topics", "describe", name, "--output", "json", *door)
        if done.returncode == 1 and "does not exist" in done.stderr:
            return None
        topic = json.loads(succeeded(done).stdout)["topics"][0]
        return topic if condition(topic) else None

    return wait_until(attempt, f"topic {name}: {what}", SETTLE_S)


def settled(door: list[str], name: str) -> dict:
    """The topic's description once every partition is led by its preferred replica with every
    replica in sync (no flag), as a fresh topic on a healthy cluster ends up."""
    return described_when(door, name, lambda topic: all(p["leader"] is not None and not p["flags"] for p in topic["partitions"]),
                          "led by its preferred replicas, all in sync")


def listed(door: list[str]) -> list[str]:
    return json.loads(succeeded(replog("topics", "list", "--output", "json", *door)).stdout)["topics"]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def running_cluster(zookeeper_server, base_dir, size: int):
    """`size` brokers over a root of their own on the shared ZooKeeper, all stopped at the end:
    the body of a module's cluster fixture."""
    running = Cluster(f"zk://{zookeeper_server.address}{unique_root()}", base_dir, size)
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    yield from running_cluster(zookeeper_server, tmp_path_factory.mktemp("topics-cli"), 3)


@pytest.fixture(params=["coord", "bootstrap"])
def door(request, cluster) -> list[str]:
    return ["--coord", cluster.coord_url] if request.param == "coord" else ["--bootstrap-server", cluster.bootstrap]


def test_create_list_describe_delete(door):
    name = unique("orders")
    done = succeeded(replog("topics", "create", name, "--partitions", "3", "--replication-factor", "3",
                            "--config", "min.insync.replicas=2", *door))
    assert done.stdout.strip() == f"Created topic {name}."
    topic = settled(door, name)
    assert (topic["partition_count"], topic["replication_factor"]) == (3, 3)
    assert topic["configs"] == {"min.insync.replicas": "2"}
    for partition in topic["partitions"]:
        assert sorted(partition["replicas"]) == sorted(partition["isr"]) == [0, 1, 2]
        assert partition["leader"] == partition["replicas"][0]
        if door[0] == "--coord":  # the store has the epoch and reassignments; Metadata answers neither
            assert isinstance(partition["leader_epoch"], int)
            assert partition["adding_replicas"] == partition["removing_replicas"] == []
        else:
            assert partition["leader_epoch"] is partition["adding_replicas"] is partition["removing_replicas"] is None
    table = succeeded(replog("topics", "describe", name, *door)).stdout
    assert f"{name} partitions: 3 replication factor: 3 configs: min.insync.replicas=2" in " ".join(table.split())
    assert max(len(line) for line in table.splitlines()) <= 80, table
    assert name in succeeded(replog("topics", "list", *door)).stdout.split()

    assert succeeded(replog("topics", "delete", name, *door)).stdout.strip() == f"Deleted topic {name}."
    wait_until(lambda: name not in listed(door), f"topic {name} gone from the listing", SETTLE_S)


def test_replica_assignment_if_not_exists_and_if_exists(door):
    name = unique("metrics.raw_events")
    done = succeeded(replog("topics", "create", name, "--replica-assignment", "0:1,1:2", *door))
    assert "mixes '.' and '_'" in done.stderr, "Kafka's metric-name collision warning"
    described_when(door, name, lambda topic: [p["replicas"] for p in topic["partitions"]] == [[0, 1], [1, 2]],
                   "on the assigned replicas")

    again = replog("topics", "create", name, "--partitions", "1", "--replication-factor", "1", *door)
    assert "already exists" in one_line_error(again, 1)
    tolerated = succeeded(replog("topics", "create", name, "--if-not-exists", "--partitions", "1",
                                 "--replication-factor", "1", "--output", "json", *door))
    assert json.loads(tolerated.stdout) == {"topic": name, "created": False}

    succeeded(replog("topics", "delete", name, *door))
    assert "does not exist" in one_line_error(replog("topics", "delete", name, *door), 1)
    gone = succeeded(replog("topics", "delete", name, "--if-exists", "--output", "json", *door))
    assert json.loads(gone.stdout) == {"topic": name, "deleted": False}


def test_alter_adds_partitions_and_sets_and_deletes_configs_all_or_nothing(door):
    name = unique("grown")
    succeeded(replog("topics", "create", name, "--partitions", "2", "--replication-factor", "2", *door))
    succeeded(replog("topics", "alter", name, "--partitions", "4", "--config", "retention.ms=60000",
                     "--config", "cleanup.policy=delete", *door))
    topic = described_when(door, name, lambda topic: topic["partition_count"] == 4, "4 partitions")
    assert topic["configs"] == {"cleanup.policy": "delete", "retention.ms": "60000"}

    succeeded(replog("topics", "alter", name, "--delete-config", "retention.ms", *door))
    assert described(door, name)[name]["configs"] == {"cleanup.policy": "delete"}

    shrink = one_line_error(replog("topics", "alter", name, "--partitions", "2", *door), 1)
    assert "cannot shrink to 2" in shrink and "keyed records" in shrink
    bad_value = one_line_error(replog("topics", "alter", name, "--partitions", "6", "--config", "retention.ms=soon", *door), 1)
    assert "retention.ms" in bad_value and "soon" in bad_value
    assert described(door, name)[name]["partition_count"] == 4, "a refused config leaves the partitions alone"
    assert "nothing to alter" in one_line_error(replog("topics", "alter", name, *door), 2)


@pytest.mark.parametrize("args, status, says", [
    (["create", "no spaces", "--partitions", "1", "--replication-factor", "1"], 1, "illegal"),
    (["create", "wide", "--partitions", "1", "--replication-factor", "4"], 1, "replication factor 4 is larger than the 3"),
    (["create", "odd", "--partitions", "1", "--replication-factor", "1", "--config", "no.such.setting=1"], 1, "no.such.setting"),
    (["create", "odd", "--partitions", "1", "--replication-factor", "1", "--config", "segment.bytes=1024"], 1,
     "Invalid value 1024 for configuration segment.bytes: Value must be at least 1048576"),
    (["create", "odd", "--config", "retention.ms"], 2, "key=value"),
    (["create", "odd", "--replica-assignment", "0:x"], 2, "'0:x' is not broker ids"),
    (["create", "odd", "--replica-assignment", "0:0"], 1, "distinct"),
    (["create", "odd", "--replica-assignment", "0:1", "--replication-factor", "3"], 1, "has 1 partitions of 2 replicas, not replication factor 3"),
    (["describe", "ghost"], 1, "'ghost' does not exist; `replog topics list` shows the topics"),
    (["alter", "ghost", "--delete-config", "retention.ms"], 1, "'ghost' does not exist"),
])
def test_bad_input_is_one_line(door, args, status, says):
    assert says in one_line_error(replog("topics", *args, *door), status)


def test_flags_and_their_filters_while_a_broker_is_down(cluster):
    doors = {"coord": ["--coord", cluster.coord_url], "bootstrap": ["--bootstrap-server", cluster.bootstrap]}
    solo, trio = unique("solo"), unique("trio")
    succeeded(replog("topics", "create", solo, "--replica-assignment", "2", *doors["coord"]))
    succeeded(replog("topics", "create", trio, "--replica-assignment", "2:0:1,0:1:2", "--config", "min.insync.replicas=3",
                     *doors["bootstrap"]))
    for name in (solo, trio):
        settled(doors["coord"], name)
    cluster.brokers[2].stop()  # controlled: it hands its leaderships over and leaves the ISRs
    try:
        doors["bootstrap"] = ["--bootstrap-server", cluster.bootstrap]

        def flagged(door: list[str], *filters: str) -> dict[tuple[str, int], list[str]]:
            topics = described(door, solo, trio, *filters)
            return {(name, p["partition"]): p["flags"] for name, topic in topics.items() for p in topic["partitions"]}

        expected = {
            (solo, 0): ["offline"],
            (trio, 0): ["under-replicated", "under-min-isr", "unpreferred-leader"],
            (trio, 1): ["under-replicated", "under-min-isr"],
        }
        for door in doors.values():
            wait_until(lambda: flagged(door) == expected, f"flags {expected}", SETTLE_S)
            assert flagged(door, "--unavailable-partitions") == {(solo, 0): ["offline"]}
            assert set(flagged(door, "--unpreferred-leader-partitions")) == {(trio, 0)}
            assert set(flagged(door, "--under-replicated-partitions")) == {(trio, 0), (trio, 1)}
            assert set(flagged(door, "--under-min-isr", "--offline")) == set(expected)
        table = succeeded(replog("topics", "describe", solo, *doors["bootstrap"])).stdout
        offline_row = next(line for line in table.splitlines() if line.startswith("0 ")).split()
        assert (offline_row[1], offline_row[-1]) == ("-", "offline"), table
    finally:
        cluster.brokers[2].restart()
    wait_until(lambda: not described(doors["coord"], "--under-replicated-partitions"), "broker 2 back in every ISR", SETTLE_S)


def test_the_store_door_works_while_every_broker_is_down(zookeeper_server):
    door = ["--coord", f"zk://{zookeeper_server.address}{unique_root()}"]
    succeeded(replog("topics", "create", "early", "--replica-assignment", "0:1,1:0", "--config", "retention.ms=1000", *door))
    succeeded(replog("topics", "alter", "early", "--config", "retention.ms=2000", *door))
    topic = described(door, "early")["early"]
    assert topic["configs"] == {"retention.ms": "2000"}
    never_led = ["under-replicated", "under-min-isr", "offline"]  # no replica ever joined an ISR
    assert [(p["leader"], p["offline_replicas"], p["flags"]) for p in topic["partitions"]] == [
        (None, [0, 1], never_led), (None, [1, 0], never_led)]
    assert succeeded(replog("topics", "list", *door)).stdout.split() == ["early"]
    succeeded(replog("topics", "delete", "early", *door))  # marked: brokers 0 and 1 finish it when they start
    assert succeeded(replog("topics", "list", *door)).stdout.split() == []


def test_the_door_comes_from_one_flag_or_variable(cluster):
    assert "give --coord URL" in one_line_error(replog("topics", "list"), 2)
    both = replog("topics", "list", "--bootstrap-server", cluster.bootstrap, env={"REPLOG_COORD": cluster.coord_url})
    assert "both --coord and --bootstrap-server" in one_line_error(both, 2)
    assert "embedded store" in one_line_error(replog("topics", "list", "--coord", "memory://"), 2)
    for variable, value in (("REPLOG_COORD", cluster.coord_url), ("REPLOG_BOOTSTRAP_SERVER", cluster.bootstrap)):
        succeeded(replog("topics", "list", env={variable: value}))
    unreachable = replog("topics", "list", "--bootstrap-server", f"127.0.0.1:{closed_port()}")
    assert "cannot reach a broker" in one_line_error(unreachable, 1)


def assert_help_with_examples(group: str, commands: tuple[str, ...]) -> None:
    """`replog GROUP COMMAND --help` fits 80 columns and ends with an example of the command."""
    for command in commands:
        done = succeeded(replog(group, command, "--help"))
        example = done.stdout.split("Example:", 1)[1]
        assert example.split()[:3] == ["replog", group, command], done.stdout
        assert max(len(line) for line in done.stdout.splitlines()) <= 80, done.stdout


def test_every_command_has_help_with_an_example():
    assert_help_with_examples("topics", COMMANDS)
