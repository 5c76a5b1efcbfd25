"""Named listeners and TLS, on a broker of this process: each client is answered with the
addresses of the listener it came in on, the registration carries every listener, records
fetched over TLS arrive intact, a client that speaks the wrong protocol to a port, or fails
the handshake, loses its own connection only, certificate files replaced under a running
broker serve new connections, and each request carries its client's principal."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import logging
import re
import ssl
import types
import uuid

import pytest
import trustme
from click.testing import CliRunner
from kio.schema.errors import ErrorCode

from replog.broker import Broker
from replog.cli import main
from replog.config import load_broker_config
from replog.coord_backends import paths
from replog.coord_backends.paths import BrokerRegistration, InvalidNodeValue
from replog.net import certificate_reload, tls
from replog.net.client import BrokerConnection, BrokerUnavailable
from replog.net.client_security import NO_SECURITY, ClientSecurity
from replog.net.codec import ApiKey
from replog.net.handlers import HANDLERS
from replog.net.handlers.metadata import broker_addresses
from replog.net.tls import TlsSettingsError
from tests.support.batches import build_batch
from tests.support.frames import api_versions_frame
from tests.support.polling import eventually

WAIT_S = 20
BATCH_HEADER_BYTES = 61


@pytest.fixture
def certificates(tmp_path):
    """(CA file, the broker's keystore file, the CA): a certificate for 127.0.0.1 and its key."""
    ca = trustme.CA()
    ca_file, keystore = tmp_path / "ca.pem", tmp_path / "broker.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(keystore))
    return ca_file, keystore, ca


def ssl_security(context: ssl.SSLContext | None) -> ClientSecurity:
    return NO_SECURITY if context is None else ClientSecurity("SSL", context)


def client_tls(ca_file, certificate: trustme.LeafCert | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file))
    if certificate is not None:
        with certificate.private_key_and_cert_chain_pem.tempfile() as pem:
            context.load_cert_chain(pem)
    return context


@contextlib.asynccontextmanager
async def running_broker(tmp_path, **settings: str):
    broker = Broker(load_broker_config(None, {
        "log.dirs": str(tmp_path / "data"), "coord.url": f"memory://{tmp_path / 'store.db'}",
        "metrics.listeners": "", "preferred.replica.election.wait.ms": "0", "offsets.topic.num.partitions": "1",
    } | settings))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def port_of(broker: Broker, listener: str) -> int:
    return next(server.port for server in broker.servers if server.listener == listener)


async def create_led_topic(broker: Broker, connection: BrokerConnection, configs: dict[str, str] | None = None) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    created = await connection.request(ApiKey.CREATE_TOPICS, None, {
        "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                    "configs": [{"name": name, "value": value} for name, value in (configs or {}).items()]}],
        "timeout": WAIT_S * 1000, "validate_only": False})
    assert created.topics[0].error_code == ErrorCode.none
    await eventually(lambda: broker.replicas.hosted(topic, 0) is not None and broker.serving(topic, 0), WAIT_S,
                     "the new partition led here")
    return topic


async def test_each_client_is_told_the_addresses_of_the_listener_it_came_in_on(tmp_path, certificates):
    ca_file, keystore, _ = certificates
    async with running_broker(tmp_path, **{
        "listeners": "PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SSL",
        "listener.name.client.ssl.keystore.location": str(keystore),
    }) as broker:
        plaintext, tls = port_of(broker, "PLAINTEXT"), port_of(broker, "CLIENT")
        assert plaintext != tls
        async with (await BrokerConnection.open("127.0.0.1", plaintext, request_timeout_s=WAIT_S) as over_plaintext,
                    await BrokerConnection.open("127.0.0.1", tls, security=ssl_security(client_tls(ca_file)),
                                                request_timeout_s=WAIT_S) as over_tls):
            topic = await create_led_topic(broker, over_plaintext)
            for connection, port in ((over_plaintext, plaintext), (over_tls, tls)):
                metadata = await connection.metadata([topic])
                assert [(address.host, address.port) for address in metadata.brokers.values()] == [("127.0.0.1", port)]
                assert metadata.topics[topic].partitions[0].leader_id == broker.broker_id
                described = await connection.request(ApiKey.DESCRIBE_CLUSTER, None, {"include_cluster_authorized_operations": False,
                                                                                       "include_fenced_brokers": False})
                assert [(found.host, found.port) for found in described.brokers] == [("127.0.0.1", port)]
                coordinator = None

                async def coordinator_found() -> bool:
                    nonlocal coordinator
                    coordinator = await connection.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
                    return coordinator.error_code == ErrorCode.none

                await eventually(coordinator_found, WAIT_S, "the group coordinator")
                assert (coordinator.host, coordinator.port) == ("127.0.0.1", port)
        registration = BrokerRegistration.decode((await broker.store.get(paths.broker(broker.broker_id)))[0])
        assert (registration.host, registration.port) == ("127.0.0.1", plaintext)  # the inter-broker listener
        assert registration.endpoints == (f"PLAINTEXT://127.0.0.1:{plaintext}", f"CLIENT://127.0.0.1:{tls}")
        assert registration.listener_security_protocol_map == {"PLAINTEXT": "PLAINTEXT", "CLIENT": "SSL"}


def test_a_broker_without_the_clients_listener_is_left_out():
    plaintext = BrokerRegistration("10.0.0.9", 9092, endpoints=("PLAINTEXT://10.0.0.9:9092",))
    only_ssl = BrokerRegistration("10.0.0.8", 9093, endpoints=("SSL://10.0.0.8:9093",))
    older = BrokerRegistration("10.0.0.7", 9092)  # written before named listeners: its PLAINTEXT listener
    services = types.SimpleNamespace(metadata=types.SimpleNamespace(brokers={1: plaintext, 2: only_ssl, 3: older}))
    assert broker_addresses(services, "PLAINTEXT") == [(1, "10.0.0.9", 9092, None), (3, "10.0.0.7", 9092, None)]
    assert broker_addresses(services, "SSL") == [(2, "10.0.0.8", 9093, None)]
    assert broker_addresses(services, "") == [(1, "10.0.0.9", 9092, None), (2, "10.0.0.8", 9093, None),
                                              (3, "10.0.0.7", 9092, None)]  # a handler called directly


def test_a_registration_with_a_garbled_endpoint_is_not_read():
    garbled = BrokerRegistration("h", 1).encode().replace(b'"endpoints":[]', b'"endpoints":["h:1"]')
    with pytest.raises(InvalidNodeValue, match="NAME://host:port"):
        BrokerRegistration.decode(garbled)


async def test_fetched_records_arrive_intact_over_tls_large_fetches_too(tmp_path, certificates):
    """Log bytes go to a plaintext socket with sendfile; over TLS they must go through the
    transport, encrypted, or the client would read garbage."""
    ca_file, keystore, _ = certificates
    async with running_broker(tmp_path, **{"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                                           "ssl.keystore.location": str(keystore)}) as broker:
        async with (await BrokerConnection.open("127.0.0.1", port_of(broker, "SSL"), security=ssl_security(client_tls(ca_file)),
                                                request_timeout_s=WAIT_S) as over_tls,
                    await BrokerConnection.open("127.0.0.1", port_of(broker, "PLAINTEXT"),
                                                request_timeout_s=WAIT_S) as over_plaintext):
            topic = await create_led_topic(broker, over_tls)
            batches = [build_batch(record_count=4, payload_bytes=900_000, fill=0x41 + index, base_offset=4 * index)
                       for index in range(4)]
            for batch in batches:
                produced = await over_tls.produce(topic, 0, bytes(batch), acks=1, timeout_ms=WAIT_S * 1000)
                assert produced.error_code == ErrorCode.none
            for connection in (over_tls, over_plaintext):
                fetched = await connection.fetch(topic, 0, 0, max_bytes=16 << 20, max_wait_ms=0)
                assert fetched.error_code == ErrorCode.none and fetched.high_watermark == 16
                assert len(fetched.records) == sum(len(batch) for batch in batches)
                position = 0
                for batch in batches:  # the leader epoch (bytes 12-16) is set by the leader
                    assert fetched.records[position + 16:position + len(batch)] == batch[16:]
                    position += len(batch)


async def test_the_wrong_protocol_on_a_port_closes_that_connection_only(tmp_path, certificates):
    ca_file, keystore, _ = certificates
    async with running_broker(tmp_path, **{"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                                           "ssl.keystore.location": str(keystore)}) as broker:
        plaintext, tls = port_of(broker, "PLAINTEXT"), port_of(broker, "SSL")
        async with await BrokerConnection.open("127.0.0.1", tls, security=ssl_security(client_tls(ca_file)),
                                               request_timeout_s=WAIT_S) as carrying_on:
            # A client that connects to the TLS port and says nothing holds up no other handshake.
            _, silent = await asyncio.open_connection("127.0.0.1", tls)
            # Plaintext Kafka to the TLS port: the handshake fails and the connection is closed.
            reader, writer = await asyncio.open_connection("127.0.0.1", tls)
            writer.write(api_versions_frame(1))
            assert await asyncio.wait_for(reader.read(), WAIT_S) == b""
            writer.close()
            assert broker.metrics.registry.get_sample_value("replog_connections_closed_total",
                                                            {"reason": "tls_handshake"}) == 1
            # TLS to the plaintext port: the ClientHello is no Kafka frame; the connection is closed.
            with pytest.raises(BrokerUnavailable):
                await BrokerConnection.open("127.0.0.1", plaintext, security=ssl_security(client_tls(ca_file)), connect_timeout_s=WAIT_S,
                                            request_timeout_s=WAIT_S)
            async with await BrokerConnection.open("127.0.0.1", tls, security=ssl_security(client_tls(ca_file)),
                                                   request_timeout_s=WAIT_S) as newcomer:
                assert (await newcomer.metadata(None)).brokers
            assert (await carrying_on.metadata(None)).brokers
            silent.close()


async def test_required_client_certificates_are_checked_against_the_truststore(tmp_path, certificates):
    ca_file, keystore, ca = certificates
    async with running_broker(tmp_path, **{"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(keystore),
                                           "ssl.truststore.location": str(ca_file), "ssl.client.auth": "required"}) as broker:
        # The broker's own inter-broker client presents its certificate too.
        assert broker.inter_broker_security.tls is not None
        refused = [client_tls(ca_file), client_tls(ca_file, trustme.CA().issue_cert("client.example"))]
        for context in refused:  # no certificate; one from another CA
            with pytest.raises(BrokerUnavailable):
                await BrokerConnection.open("127.0.0.1", broker.server.port, security=ssl_security(context), connect_timeout_s=WAIT_S,
                                            request_timeout_s=WAIT_S)
        async with await BrokerConnection.open("127.0.0.1", broker.server.port,
                                               security=ssl_security(client_tls(ca_file, ca.issue_cert("client.example"))),
                                               request_timeout_s=WAIT_S) as accepted:
            assert (await accepted.metadata(None)).brokers


@pytest.fixture
def process_state_kept():
    """`replog broker start` sets the root logger's level, its handlers' formats and filters, and
    the cycle collector's pace: given back after, for the tests that follow in this process."""
    root = logging.getLogger()
    kept = root.level, [(handler, handler.formatter, list(handler.filters)) for handler in root.handlers]
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    root.setLevel(kept[0])
    for handler, formatter, filters in kept[1]:
        handler.setFormatter(formatter)
        handler.filters[:] = filters


@pytest.mark.parametrize("listen, status, complaint", [
    ("SASL_SSL://127.0.0.1:0", 1, "listener SASL_SSL is SSL but has no certificate"),
    ("SSL://127.0.0.1:0", 1, "listener SSL is SSL but has no certificate"),
])
def test_a_listener_that_cannot_be_served_stops_the_start_with_one_line(tmp_path, listen, status, complaint,
                                                                       process_state_kept):
    done = CliRunner().invoke(main, ["broker", "start", "--metrics-listen", "", "--listen", listen,
                                     "--data-dir", str(tmp_path / "data")])
    assert done.exit_code == status and complaint in done.output, done.output
    assert len(done.output.strip().splitlines()) == 1, done.output


@pytest.mark.parametrize("settings, complaint", [
    ({"listeners": "SSL://127.0.0.1:0"}, "listener SSL is SSL but has no certificate"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent.pem"},
     "ssl.keystore.location /nonexistent.pem does not exist"),
])
def test_an_ssl_listener_without_a_usable_certificate_is_refused_at_start(tmp_path, settings, complaint):
    with pytest.raises(TlsSettingsError, match=complaint):
        Broker(load_broker_config(None, {"log.dirs": str(tmp_path / "data"), "metrics.listeners": ""} | settings))


def test_an_encrypted_key_needs_its_password_which_no_message_shows(tmp_path, certificates):
    from cryptography.hazmat.primitives import serialization

    _, _, ca = certificates
    leaf = ca.issue_cert("127.0.0.1")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"s3cret-pw"))
    chain = b"".join(blob.bytes() for blob in leaf.cert_chain_pems).decode()
    inline = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.certificate.chain": chain,
              "ssl.keystore.key": encrypted.decode(), "log.dirs": str(tmp_path / "data"), "metrics.listeners": ""}
    with pytest.raises(TlsSettingsError) as refused:
        Broker(load_broker_config(None, inline | {"ssl.key.password": "wrong"}))
    assert "ssl.key.password" in str(refused.value) and "wrong" not in str(refused.value)
    broker = Broker(load_broker_config(None, inline | {"ssl.key.password": "s3cret-pw"}))
    broker.data_dir_lock.release()
    assert "s3cret-pw" not in repr(dict(broker.config))


async def served_subject(port: int, ca_file) -> str:
    """The common name of the certificate a new TLS connection to `port` is served."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls(ca_file))
    try:
        return dict(entry[0] for entry in writer.get_extra_info("peercert")["subject"])["commonName"]
    finally:
        writer.close()


async def test_replaced_certificate_files_serve_new_connections_and_old_ones_carry_on(tmp_path, certificates,
                                                                                      monkeypatch, caplog):
    ca_file, keystore, ca = certificates
    caplog.set_level(logging.INFO, logger=certificate_reload.__name__)
    monkeypatch.setattr(certificate_reload, "CHECK_INTERVAL_S", 0.05)
    first_expiry = datetime.datetime(2040, 1, 1, tzinfo=datetime.timezone.utc)
    ca.issue_cert("127.0.0.1", common_name="first", not_after=first_expiry).private_key_and_cert_chain_pem.write_to_path(
        str(keystore))
    async with running_broker(tmp_path, **{"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(keystore),
                                           "metrics.listeners": "127.0.0.1:0"}) as broker:
        def expiry() -> float | None:
            return broker.metrics.registry.get_sample_value("replog_tls_certificate_expiry_timestamp_seconds",
                                                           {"listener": "SSL"})

        assert expiry() == first_expiry.timestamp()
        assert await served_subject(broker.server.port, ca_file) == "first"
        async with await BrokerConnection.open("127.0.0.1", broker.server.port, security=ssl_security(client_tls(ca_file)),
                                               request_timeout_s=WAIT_S) as old:
            second_expiry = datetime.datetime(2041, 6, 1, tzinfo=datetime.timezone.utc)
            replacement = tmp_path / "replacement.pem"
            ca.issue_cert("127.0.0.1", common_name="second", not_after=second_expiry).private_key_and_cert_chain_pem.write_to_path(
                str(replacement))
            replacement.replace(keystore)  # as an operator's tooling does: whole, in one step

            async def second_served() -> bool:
                return await served_subject(broker.server.port, ca_file) == "second"

            await eventually(second_served, WAIT_S, "the new certificate served")
            assert expiry() == second_expiry.timestamp()
            assert (await old.metadata(None)).brokers  # the connection made before goes on
        reloads = [record.getMessage() for record in caplog.records if "TLS certificate reloaded" in record.getMessage()]
        assert len(reloads) == 1 and "subject=CN=second" in reloads[0] and "not_after=2041-06-01" in reloads[0]


async def test_a_replacement_that_does_not_load_leaves_the_certificate_serving(tmp_path, certificates, caplog):
    ca_file, keystore, _ = certificates
    async with running_broker(tmp_path, **{"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(keystore)}) as broker:
        keystore.write_text("-----BEGIN PRIVATE KEY-----\nhalf written")
        certificate_watch = broker._certificate_watches[0]
        assert not certificate_watch.check()
        assert not certificate_watch.check()  # warned once per change
        assert len([record for record in caplog.records if "changed TLS files not loaded" in record.getMessage()]) == 1
        async with await BrokerConnection.open("127.0.0.1", broker.server.port, security=ssl_security(client_tls(ca_file)),
                                               request_timeout_s=WAIT_S) as connection:
            assert (await connection.metadata(None)).brokers


@contextlib.contextmanager
def principals_seen(monkeypatch) -> list[str]:
    """The principal of each Metadata request the broker handles meanwhile."""
    seen: list[str] = []
    answer = HANDLERS[ApiKey.METADATA]

    async def recording(services, request):
        seen.append(request.principal)
        return await answer(services, request)

    monkeypatch.setitem(HANDLERS, ApiKey.METADATA, recording)
    yield seen


async def test_a_client_certificate_names_the_principal_and_others_are_anonymous(tmp_path, certificates, monkeypatch):
    ca_file, keystore, ca = certificates
    async with running_broker(tmp_path, **{
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MAPPED://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MAPPED:SSL", "ssl.keystore.location": str(keystore),
        "ssl.truststore.location": str(ca_file), "ssl.client.auth": "requested",
        "listener.name.mapped.ssl.principal.mapping.rules": "RULE:^CN=admin,.*$/root/, RULE:^CN=([^,]*),.*$/$1/U",
    }) as broker:
        client_certificate = ca.issue_cert("client.example", common_name="client.example")
        clients = [(port_of(broker, "PLAINTEXT"), None), (port_of(broker, "SSL"), client_tls(ca_file)),
                   (port_of(broker, "SSL"), client_tls(ca_file, client_certificate)),
                   (port_of(broker, "MAPPED"), client_tls(ca_file, client_certificate))]
        with principals_seen(monkeypatch) as seen:
            for port, context in clients:
                async with await BrokerConnection.open("127.0.0.1", port, security=ssl_security(context), request_timeout_s=WAIT_S) as client:
                    await client.metadata(None)
        assert seen[:2] == ["User:ANONYMOUS", "User:ANONYMOUS"]
        assert re.fullmatch(r"User:CN=client\.example,OU=[^,]+,O=[^,]+", seen[2]), seen[2]  # Kafka's DEFAULT: the DN
        assert seen[3] == "User:CLIENT.EXAMPLE"


async def test_a_certificate_no_rule_maps_is_refused(tmp_path, certificates):
    ca_file, keystore, ca = certificates
    async with running_broker(tmp_path, **{
        "listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(keystore), "ssl.truststore.location": str(ca_file),
        "ssl.client.auth": "required", "ssl.principal.mapping.rules": "RULE:^CN=admin,.*$/admin/L",
    }) as broker:
        with pytest.raises(BrokerUnavailable):
            await BrokerConnection.open("127.0.0.1", broker.server.port, connect_timeout_s=WAIT_S, request_timeout_s=WAIT_S,
                                        security=ssl_security(client_tls(ca_file, ca.issue_cert("someone", common_name="someone"))))
        async with await BrokerConnection.open("127.0.0.1", broker.server.port, request_timeout_s=WAIT_S,
                                               security=ssl_security(client_tls(ca_file, ca.issue_cert("admin", common_name="admin")))) as admin:
            assert (await admin.metadata(None)).brokers


@pytest.mark.parametrize("algorithm, checked", [("https", True), ("", False)])
def test_brokers_check_each_others_host_names_unless_told_not_to(tmp_path, certificates, algorithm, checked):
    ca_file, keystore, _ = certificates
    context = tls.client_context(load_broker_config(None, {
        "listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(keystore), "ssl.truststore.location": str(ca_file),
        "ssl.endpoint.identification.algorithm": algorithm}), "SSL")
    assert context.check_hostname is checked and context.verify_mode == ssl.CERT_REQUIRED
