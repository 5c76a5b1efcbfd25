"""Replication over SASL_SSL: three brokers whose only listener is SASL_SSL, with SCRAM-SHA-512
between brokers (each broker's password from a file) and super.users naming the broker user,
over ZooKeeper, and over the authenticated stores (ZooKeeper with SASL DIGEST-MD5 and znode
ACLs, etcd with TLS client certificates and RBAC: tests/support/secure_servers.py). Users are
made in the store before any broker starts (`replog users create --coord`, with the brokers'
--coord-config for an authenticated store); clients (confluent-kafka) authenticate as another
user. A topic replicates, and a
SIGKILL of a leader under acks=all writes loses nothing acknowledged (test_failover's check).
A client with a wrong password, and one speaking PLAINTEXT to the port, get nothing. Over an
authenticated store, the admin commands' store door works with the brokers' --coord-config and
not without it, and no password reaches the brokers' logs or the commands' output.

The authorizer is on: brokers pass as super users, the client by ACLs written in the store
before the brokers start (`replog acls add --coord`). An ACL added through one broker (CreateAcls)
takes effect on all three: how long it took each is printed."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import time

import pytest
import trustme

from replog.net.client import BrokerConnection, BrokerUnavailable, SaslAuthenticationFailed
from replog.net.client_security import ClientSecurity
from replog.tls_settings import Secret
from tests.cluster.test_failover import kill_under_writes
from tests.support.cluster import QUICK_SETTINGS, Cluster
from tests.support.failover import PARTITIONS, create_topic, wait_until_in_sync
from tests.support.secure_servers import SecureServer
from tests.support.servers import unique_root

BROKER_PASSWORD = "s3cret-broker-58"
CLIENT_PASSWORD = "s3cret-app-24"
MECHANISM = "SCRAM-SHA-512"
WAIT_S = 30


def replog_command(*arguments: str) -> None:
    done = subprocess.run([sys.executable, "-m", "replog", *arguments], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def create_user(coord_url: str, user: str, password_file, coord_config: tuple[str, ...]) -> None:
    replog_command("users", "create", user, "--mechanism", MECHANISM, "--password-file", str(password_file),
                   "--coord", coord_url, *coord_config)


# What the application user may do: everything on topics and groups, create topics; nothing else
# on the cluster.
APP_ACLS = (("--topic", "*"), ("--group", "*"), ("--cluster", "--operation", "Create"))


STORES = {"zk": "zookeeper_server", "secure-zk": "secure_zookeeper_server", "secure-etcd": "secure_etcd_server"}


@pytest.fixture(params=list(STORES))
def sasl_ssl_cluster(request, tmp_path):
    server = request.getfixturevalue(STORES[request.param])
    secured = isinstance(server, SecureServer)
    store_settings = server.settings() if secured else {}
    coord_config: tuple[str, ...] = ()
    if secured:
        coord_config = ("--coord-config", str(server.write_coord_config(tmp_path / "coord.toml")))
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "broker.pem"))
    for user, password in (("broker", BROKER_PASSWORD), ("app", CLIENT_PASSWORD)):
        (tmp_path / f"{user}.password").write_text(f"{password}\n")
    coord_url = f"{request.param.removeprefix('secure-')}://{server.address}{unique_root()}"
    for user in ("broker", "app"):
        create_user(coord_url, user, tmp_path / f"{user}.password", coord_config)
    for resource in APP_ACLS:
        replog_command("acls", "add", "--allow-principal", "User:app", *resource, "--coord", coord_url, *coord_config)
    cluster = Cluster(coord_url, tmp_path, 3, (
        *(argument for name, value in store_settings.items() for argument in ("--set", f"{name}={value}")),
        "--set", f"ssl.keystore.location={tmp_path / 'broker.pem'}", "--set", f"ssl.truststore.location={tmp_path / 'ca.pem'}",
        "--set", f"sasl.enabled.mechanisms={MECHANISM}", "--set", f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        "--set", "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
                 "org.apache.kafka.common.security.scram.ScramLoginModule required username=broker;",
        "--set", f"sasl.inter.broker.password.file={tmp_path / 'broker.password'}",
        "--set", "super.users=User:broker", "--set", "authorizer.class.name=StandardAuthorizer",
    ), QUICK_SETTINGS, listeners=("SASL_SSL",), client_security={
        "security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM, "sasl.username": "app",
        "sasl.password": CLIENT_PASSWORD, "ssl.ca.location": str(tmp_path / "ca.pem"),
    })
    cluster.secrets = [BROKER_PASSWORD, CLIENT_PASSWORD, *(server.passwords.values() if secured else ())]
    cluster.coord_config = coord_config
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def cluster_status(cluster, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replog", "cluster", "status", "--coord", cluster.coord_url, *options],
                          capture_output=True, text=True, timeout=60)


def assert_the_store_door_needs_the_brokers_coord_config(cluster) -> str:
    """`replog cluster status` lists every broker with the brokers' --coord-config, none without;
    returns what both printed."""
    status = cluster_status(cluster, *cluster.coord_config)
    assert status.returncode == 0, status.stderr
    for broker in cluster.brokers.values():
        assert f"127.0.0.1:{broker.port}" in status.stdout
    anonymous = cluster_status(cluster)
    assert anonymous.returncode != 0 and f"127.0.0.1:{cluster.brokers[0].port}" not in anonymous.stdout
    return status.stdout + status.stderr + anonymous.stdout + anonymous.stderr


def secured(user: str, password: str, ca_file: str) -> ClientSecurity:
    return ClientSecurity("SASL_SSL", ssl.create_default_context(cafile=ca_file), MECHANISM, user, Secret(password))


async def denial_reaches_every_broker(ports: list[int], topic: str, ca_file: str) -> list[float]:
    """Deny the application Describe on `topic` through the first broker (as the broker user, a
    super user); the seconds until each broker's Metadata stops showing it the topic."""
    opened_s = time.perf_counter()
    connections = [await BrokerConnection.open("127.0.0.1", port, request_timeout_s=WAIT_S,
                                               security=secured("app", CLIENT_PASSWORD, ca_file)) for port in ports]
    admin = await BrokerConnection.open("127.0.0.1", ports[0], request_timeout_s=WAIT_S,
                                        security=secured("broker", BROKER_PASSWORD, ca_file))
    try:
        for connection in connections:  # a restarted broker's metadata may lag a moment
            while topic not in (await connection.metadata(None)).topics:
                assert time.perf_counter() - opened_s < WAIT_S, "a broker's metadata never showed the topic"
        denial = {"resource_type": 2, "resource_name": topic, "resource_pattern_type": 3, "principal": "User:app",
                  "host": "*", "operation": 8, "permission_type": 2}  # Topic, LITERAL, Describe, Deny
        answer = await admin.request(30, None, {"creations": [denial]})  # CreateAcls
        assert [result.error_code for result in answer.results] == [0]
        added_s = time.perf_counter()
        took_s: list[float | None] = [None] * len(ports)
        while None in took_s:
            assert time.perf_counter() - added_s < WAIT_S, f"the denial reached only brokers at {took_s}"
            for index, connection in enumerate(connections):
                if took_s[index] is None and topic not in (await connection.metadata(None)).topics:
                    took_s[index] = time.perf_counter() - added_s
        return took_s
    finally:
        for connection in (*connections, admin):
            connection.close()


async def refused_without_credentials(port: int, ca_file: str) -> None:
    context = ssl.create_default_context(cafile=ca_file)
    with pytest.raises(SaslAuthenticationFailed, match="SASL_AUTHENTICATION_FAILED"):
        await BrokerConnection.open("127.0.0.1", port, request_timeout_s=WAIT_S, security=ClientSecurity(
            "SASL_SSL", context, MECHANISM, "app", Secret(CLIENT_PASSWORD + "x")))
    with pytest.raises(BrokerUnavailable):
        await BrokerConnection.open("127.0.0.1", port, connect_timeout_s=WAIT_S, request_timeout_s=WAIT_S)


def test_brokers_replicate_over_sasl_ssl_and_a_leader_killed_loses_nothing_acknowledged(sasl_ssl_cluster, tmp_path):
    cluster = sasl_ssl_cluster
    printed = assert_the_store_door_needs_the_brokers_coord_config(cluster) if cluster.coord_config else ""
    assert not [secret for secret in cluster.secrets if secret in printed]
    create_topic(cluster.bootstrap, "over-sasl", PARTITIONS)
    leaders = {index: meta.leader for index, meta in wait_until_in_sync(cluster.bootstrap, "over-sasl").items()}
    asyncio.run(refused_without_credentials(cluster.brokers[0].port, str(tmp_path / "ca.pem")))
    kill_under_writes(cluster, "over-sasl", leaders[0])
    cluster.brokers[leaders[0]].restart()
    ports = [cluster.brokers[broker].port for broker in sorted(cluster.brokers)]
    took_s = asyncio.run(denial_reaches_every_broker(ports, "over-sasl", str(tmp_path / "ca.pem")))
    print(f"an ACL added through broker 0 took effect on brokers 0, 1, 2 after "
          f"{', '.join(f'{seconds * 1000:.0f}' for seconds in took_s)} ms")
    for broker in cluster.brokers.values():  # all each printed, through the failover and the restart
        output = "".join(broker.output)
        assert "super.users is empty" not in output and "cannot authenticate to other brokers" not in output
        assert "zookeeper session state=connected" in output or "etcd session lease=" in output
        assert not [secret for secret in cluster.secrets if secret in output]
