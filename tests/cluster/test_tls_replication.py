"""Replication over TLS: three brokers whose inter-broker listener is SSL, with client
certificates required there, so that only brokers (holding the cluster's certificate) can
fetch; clients produce and read on the PLAINTEXT listener. A topic replicates, and a SIGKILL of
a leader under acks=all writes loses nothing acknowledged (test_failover's check)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trustme

from tests.cluster.conftest import SHARED_SERVERS, _running_cluster
from tests.cluster.test_failover import kill_under_writes
from tests.support.failover import PARTITIONS, create_topic, wait_until_in_sync


@pytest.fixture(params=["zk", "etcd"])
def tls_cluster(request, tmp_path):
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "broker.pem"))
    yield from _running_cluster(request, tmp_path, SHARED_SERVERS, (
        "--set", "inter.broker.listener.name=SSL", "--set", "listener.name.ssl.ssl.client.auth=required",
        "--set", f"ssl.keystore.location={tmp_path / 'broker.pem'}", "--set", f"ssl.truststore.location={tmp_path / 'ca.pem'}",
    ), listeners=("PLAINTEXT", "SSL"))


def test_followers_fetch_over_tls_and_a_leader_killed_loses_nothing_acknowledged(tls_cluster):
    # Brokers connect to each other at the registered address: the SSL listener's.
    status = subprocess.run([sys.executable, "-m", "replog", "cluster", "status", "--coord", tls_cluster.coord_url],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    for broker in tls_cluster.brokers.values():
        assert f"127.0.0.1:{broker.ports['SSL']}" in status.stdout
        assert f"127.0.0.1:{broker.ports['PLAINTEXT']}" not in status.stdout
    create_topic(tls_cluster.bootstrap, "over-tls", PARTITIONS)
    leaders = {index: meta.leader for index, meta in wait_until_in_sync(tls_cluster.bootstrap, "over-tls").items()}
    kill_under_writes(tls_cluster, "over-tls", leaders[0])
