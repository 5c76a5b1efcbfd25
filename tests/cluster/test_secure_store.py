"""Three brokers over an authenticated store: ZooKeeper with SASL DIGEST-MD5 and znode ACLs,
etcd with an RBAC user, both over TLS with client certificates. They register, replicate, and a SIGKILL
of a leader under acks=all writes loses nothing acknowledged (test_failover's check); the admin
commands' store door works with the brokers' --coord-config and not without it; no password
reaches the brokers' logs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cluster.conftest import _running_cluster
from tests.cluster.test_failover import kill_under_writes
from tests.support.failover import PARTITIONS, create_topic, wait_until_in_sync
from tests.support.servers import unique_root

SECURE_SERVERS = {"zk": "secure_zookeeper_server", "etcd": "secure_etcd_server"}


@pytest.fixture(params=["zk", "etcd"])
def secure_store_cluster(request, tmp_path):
    secured = request.getfixturevalue(SECURE_SERVERS[request.param])
    settings = [argument for name, value in secured.settings().items() for argument in ("--set", f"{name}={value}")]
    for cluster in _running_cluster(request, tmp_path, SECURE_SERVERS, tuple(settings)):
        cluster.secured = secured
        yield cluster


def _cluster_status(cluster, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replog", "cluster", "status", "--coord", cluster.coord_url, *options],
                          capture_output=True, text=True, timeout=60)


def test_a_cluster_over_an_authenticated_store_replicates_and_a_leader_killed_loses_nothing(secure_store_cluster, tmp_path):
    cluster = secure_store_cluster
    coord_config = cluster.secured.write_coord_config(tmp_path / "coord.toml")
    status = _cluster_status(cluster, "--coord-config", str(coord_config))
    assert status.returncode == 0, status.stderr
    for broker in cluster.brokers.values():
        assert f"127.0.0.1:{broker.port}" in status.stdout
    anonymous = _cluster_status(cluster)
    assert anonymous.returncode != 0 and f"127.0.0.1:{cluster.brokers[0].port}" not in anonymous.stdout

    create_topic(cluster.bootstrap, "over-secure-store", PARTITIONS)
    leaders = {index: meta.leader for index, meta in wait_until_in_sync(cluster.bootstrap, "over-secure-store").items()}
    kill_under_writes(cluster, "over-secure-store", leaders[0])

    logged = "".join(line for broker in cluster.brokers.values() for line in broker.output)
    assert "zookeeper session state=connected" in logged or "etcd session lease=" in logged
    for password in cluster.secured.passwords.values():
        assert password not in logged
        assert password not in status.stdout + status.stderr + anonymous.stdout + anonymous.stderr


@pytest.mark.parametrize("kind", ["zk", "etcd"])
def test_a_broker_with_a_wrong_password_stops_in_one_line_naming_its_user(kind, request, tmp_path):
    secured = request.getfixturevalue(SECURE_SERVERS[kind])
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-broker-password\n")
    settings = secured.settings() | {"coord.password.file": str(wrong)}
    done = subprocess.run([sys.executable, "-m", "replog", "broker", "start", "--metrics-listen", "", "--listen", "127.0.0.1:0",
                           "--data-dir", str(tmp_path / "data"), "--coord", f"{kind}://{secured.address}{unique_root()}",
                           *(argument for name, value in settings.items() for argument in ("--set", f"{name}={value}"))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    refusal = done.stderr.strip().splitlines()[-1]
    assert refusal.startswith("replog: ") and "denied access" in refusal and "as user broker" in refusal, done.stderr
    assert "not-the-broker-password" not in done.stderr + done.stdout
