"""The authenticated store: ZooKeeper with SASL DIGEST-MD5 and znode ACLs (zookeeper.set.acl),
etcd with RBAC users, both over TLS with client certificates. The core of the Store contract holds
over both; a client without credentials (kazoo or aetcd without a user or a certificate) can
neither read nor write replog's nodes; a wrong password is refused, saying whose; no password
reaches a log line; an etcd restart, which forgets every auth token, costs the store nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import subprocess
import sys

import aetcd
import pytest
from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE

from replog.coord_backends import AccessDenied, CoordinationUnavailable, SessionLost, StoreSecurity, open_store
from replog.coord_backends.etcd_client import EtcdClient
from tests.backends import test_conformance as contract
from tests.backends.conftest import store_url
from tests.support.polling import eventually, first_matching, next_within
from tests.support.secure_servers import running_secure_server

# The contract's tests of operations, transactions, watches and sessions, over the secured
# servers (the fixtures below give them their `store` and `connect`).
test_create_get_set_exists_children = contract.test_create_get_set_exists_children
test_create_errors_name_the_path = contract.test_create_errors_name_the_path
test_make_parents_creates_the_missing_ancestors = contract.test_make_parents_creates_the_missing_ancestors
test_compare_and_set = contract.test_compare_and_set
test_delete_rules = contract.test_delete_rules
test_recursive_delete_removes_the_subtree_only = contract.test_recursive_delete_removes_the_subtree_only
test_sequential_nodes_are_ordered = contract.test_sequential_nodes_are_ordered
test_transaction_applies_everything = contract.test_transaction_applies_everything
test_ephemeral_create_in_transaction = contract.test_ephemeral_create_in_transaction
test_data_watch_sees_creation_and_deletion = contract.test_data_watch_sees_creation_and_deletion
test_children_watch_sees_creations_and_deletions = contract.test_children_watch_sees_creations_and_deletions
test_expired_session_drops_ephemerals_and_reports_lost_then_connected = \
    contract.test_expired_session_drops_ephemerals_and_reports_lost_then_connected


@pytest.fixture(params=["zk", "etcd"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def secured(backend, request):
    return request.getfixturevalue("secure_zookeeper_server" if backend == "zk" else "secure_etcd_server")


@pytest.fixture
def url(backend, secured, tmp_path) -> str:
    return store_url(backend, secured.address, tmp_path)


@pytest.fixture
def security(secured) -> StoreSecurity:
    return secured.security()


async def _replog_nodes(store) -> list[str]:
    """Nodes as a broker leaves them: persistent, ephemeral, with children."""
    await store.create("/brokers/ids", b"", make_parents=True)
    await store.create("/brokers/ids/0", b'{"host": "127.0.0.1"}', ephemeral=True)
    await store.create("/config/users/alice", b"salted", make_parents=True)
    return ["/brokers", "/brokers/ids", "/brokers/ids/0", "/config", "/config/users", "/config/users/alice"]


async def test_zookeeper_without_credentials_can_neither_read_nor_write_replogs_nodes(secure_zookeeper_server, tmp_path):
    url = store_url("zk", secure_zookeeper_server.address, tmp_path)
    root = url.rsplit("/", 1)[1]
    store = open_store(url, security=secure_zookeeper_server.security())
    await store.start()
    certified = secure_zookeeper_server.security()
    without_certificate = KazooClient(hosts=secure_zookeeper_server.address, use_ssl=True, ca=certified.truststore_location)
    with pytest.raises(Exception):
        await asyncio.to_thread(without_certificate.start, 5)
    # A client the server lets in (its certificate is from the CA) but who has not signed in.
    anonymous = KazooClient(hosts=secure_zookeeper_server.address, use_ssl=True, ca=certified.truststore_location,
                            certfile=certified.keystore_location, keyfile=certified.keystore_location)
    await asyncio.to_thread(anonymous.start, 30)
    try:
        paths = [f"/{root}{path}" for path in await _replog_nodes(store)]
        for path in [f"/{root}", *paths]:
            for refused in (lambda: anonymous.get(path), lambda: anonymous.get_children(path),
                            lambda: anonymous.set(path, b"forged"), lambda: anonymous.create(f"{path}/forged"),
                            lambda: anonymous.set_acls(path, OPEN_ACL_UNSAFE)):
                with pytest.raises(kz.NoAuthError):
                    await asyncio.to_thread(refused)
        with pytest.raises(kz.NoAuthError):
            await asyncio.to_thread(anonymous.delete, paths[-1])
        assert (await store.get("/config/users/alice"))[0] == b"salted"
    finally:
        await asyncio.to_thread(anonymous.stop)
        await store.close()


async def test_etcd_without_a_user_or_a_certificate_can_neither_read_nor_write_replogs_nodes(secure_etcd_server, tmp_path):
    url = store_url("etcd", secure_etcd_server.address, tmp_path)
    prefix = url.rsplit("/", 1)[1]
    store = open_store(url, security=secure_etcd_server.security())
    await store.start()
    host, port = secure_etcd_server.address.split(":")
    certified = secure_etcd_server.security()
    without_user = EtcdClient(host, int(port), StoreSecurity(tls=True, truststore_location=certified.truststore_location,
                                                             keystore_location=certified.keystore_location),
                              timeout=10, options={})
    without_certificate = EtcdClient(host, int(port), StoreSecurity(username="broker", password=certified.password, tls=True,
                                                                    truststore_location=certified.truststore_location),
                                     timeout=10, options={})
    plaintext = aetcd.Client(host=host, port=int(port), timeout=10)
    try:
        keys = [f"/{prefix}{path}".encode() for path in await _replog_nodes(store)]
        await without_user.connect()
        for key in keys:
            with pytest.raises(aetcd.exceptions.ClientError, match="permission denied"):
                await without_user.get(key)
            with pytest.raises(aetcd.exceptions.ClientError, match="permission denied"):
                await without_user.put(key, b"forged")
        with pytest.raises(aetcd.exceptions.ClientError, match="permission denied"):
            await without_user.delete_prefix(f"/{prefix}".encode())
        for client in (without_certificate, plaintext):
            with pytest.raises(Exception):
                await client.connect()
                await client.get(keys[0])
        assert (await store.get("/config/users/alice"))[0] == b"salted"
    finally:
        for client in (without_user, without_certificate, plaintext):
            await client.close()
        await store.close()


async def test_a_wrong_password_is_refused_saying_whose(backend, secured, url):
    store = open_store(url, security=secured.security(password="not-the-password"), session_timeout_ms=5000)
    with pytest.raises(AccessDenied, match="as user broker") as refused:
        await store.start()
    assert "not-the-password" not in str(refused.value)
    assert secured.passwords["broker"] not in str(refused.value)


async def test_no_password_reaches_a_log_line(backend, secured, url, caplog):
    caplog.set_level(logging.DEBUG)
    store = open_store(url, security=secured.security())
    await store.start()
    try:
        await _replog_nodes(store)
        watch = await store.watch_data("/brokers/ids/0")
        await next_within(watch)
        await watch.close()
    finally:
        await store.close()
    # Refused as AccessDenied (test_a_wrong_password_is_refused_saying_whose); here only the log
    # lines matter, and kazoo, seldom, reports ZooKeeper's drop of the connection after the
    # failed SASL exchange as the new session's expiry instead.
    with pytest.raises((AccessDenied, SessionLost)):
        await open_store(url, security=secured.security(password="wrong-one-of-a-kind"), session_timeout_ms=5000).start()
    assert caplog.records
    for secret in (*secured.passwords.values(), "wrong-one-of-a-kind"):
        assert secret not in caplog.text
    assert "[hidden]" not in repr(secured.security())  # left out of the repr altogether
    assert secured.passwords["broker"] not in repr(secured.security())


async def test_a_zookeeper_store_made_without_acls_is_reported_and_replog_coord_secure_closes_it(secure_zookeeper_server, tmp_path, caplog):
    url = store_url("zk", secure_zookeeper_server.address, tmp_path)
    open_root = secure_zookeeper_server.security()
    unsecured = open_store(url, security=dataclasses.replace(open_root, set_acl=False))
    await unsecured.start()
    await unsecured.create("/brokers/ids/0", b"{}", make_parents=True)
    await unsecured.close()
    caplog.set_level(logging.WARNING)
    store = open_store(url, security=open_root)
    await store.start()
    await store.close()
    assert "zookeeper.set.acl is on but the store's root" in caplog.text
    assert "replog coord secure" in caplog.text
    anonymous = KazooClient(hosts=secure_zookeeper_server.address, use_ssl=True, ca=open_root.truststore_location,
                            certfile=open_root.keystore_location, keyfile=open_root.keystore_location)
    await asyncio.to_thread(anonymous.start, 30)
    try:
        root = "/" + url.rsplit("/", 1)[1]
        assert await asyncio.to_thread(anonymous.get_children, root)  # open: what the warning is about
        secured = subprocess.run([sys.executable, "-m", "replog", "coord", "secure", "--coord", url, "--coord-config",
                                  str(secure_zookeeper_server.write_coord_config(tmp_path / "coord.toml"))],
                                 capture_output=True, text=True, timeout=120)
        assert secured.returncode == 0, secured.stderr
        assert secured.stdout.startswith("secured ") and "for user broker" in secured.stdout
        for path in (root, f"{root}/brokers", f"{root}/brokers/ids/0"):
            with pytest.raises(kz.NoAuthError):
                await asyncio.to_thread(anonymous.get, path)
        store = open_store(url, security=open_root)
        await store.start()
        assert (await store.get("/brokers/ids/0"))[0] == b"{}"
        await store.close()
    finally:
        await asyncio.to_thread(anonymous.stop)


@pytest.fixture(params=["zk", "etcd"])
def private_secure_server(request, tmp_path_factory):
    yield from running_secure_server(request.param, tmp_path_factory)


async def test_a_restart_of_the_secured_server_costs_neither_writes_nor_the_watch(private_secure_server, tmp_path):
    # ZooKeeper: kazoo signs in again on every connection. etcd keeps its simple tokens in
    # memory: after a restart every one is refused ("invalid auth token"), as one idle past
    # --auth-token-ttl is, and the store signs in again.
    server = private_secure_server
    url = store_url(server.kind, server.address, tmp_path)
    store = open_store(url, security=server.security(), session_timeout_ms=20_000)
    writer = open_store(url, security=server.security(), session_timeout_ms=20_000)
    await store.start()
    await writer.start()
    try:
        await writer.create("/survivor", b"before")
        watch = await store.watch_data("/survivor")
        assert (await next_within(watch)).data == b"before"
        await asyncio.to_thread(server.process.restart)

        async def written() -> bool:
            try:
                await writer.set("/survivor", b"after")
                return True
            except CoordinationUnavailable:
                return False

        await eventually(written, 60, "a write after the restart")
        assert (await first_matching(watch, lambda event: event.data == b"after", timeout_s=60)).data == b"after"
        assert (await store.get("/survivor"))[0] == b"after"
        # The lease keeper's own client renewed its token too: its lease takes an ephemeral node.
        await store.create("/ephemeral", b"", ephemeral=True)
        assert await writer.exists("/ephemeral") is not None
        await watch.close()
    finally:
        await store.close()
        await writer.close()
