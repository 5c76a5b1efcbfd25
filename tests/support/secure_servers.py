"""Secured ZooKeeper and etcd servers for the tests of the authenticated store: the users,
passwords and certificates their scripts' secured modes read (scripts/zookeeper.sh,
scripts/etcd.sh), made here, and the settings a broker or a tool connects with.

Both serve TLS only, to clients with a certificate from a CA made here. ZooKeeper: SASL
DIGEST-MD5 users `broker` and `admin` (ZooKeeper's super user). etcd: users `root` and `broker`
(role replog), auth enabled.
"""

from __future__ import annotations

import dataclasses
import pathlib
import secrets

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from replog.coord_backends import StoreSecurity
from replog.tls_settings import Secret
from tests.support.servers import ServerProcess

BROKER_USER = "broker"


@dataclasses.dataclass
class SecureServer:
    kind: str  # "zk" | "etcd"
    process: ServerProcess
    passwords: dict[str, str] = dataclasses.field(repr=False)
    files: pathlib.Path  # the broker's password file and, for etcd, its CA and client certificate

    @property
    def address(self) -> str:
        return self.process.address

    @property
    def password_file(self) -> pathlib.Path:
        return self.files / "broker.password"

    def security(self, password: str | None = None) -> StoreSecurity:
        """What a broker connects with; with `password`, another than the broker's."""
        password = Secret(self.passwords[BROKER_USER] if password is None else password)
        return StoreSecurity(username=BROKER_USER, password=password, set_acl=self.kind == "zk", tls=True,
                             truststore_location=str(self.files / "ca.pem"), keystore_location=str(self.files / "broker.pem"))

    def settings(self) -> dict[str, str]:
        """The same, as broker settings."""
        settings = {"coord.username": BROKER_USER, "coord.password.file": str(self.password_file),
                    "coord.ssl.client.enable": "true", "coord.ssl.truststore.location": str(self.files / "ca.pem"),
                    "coord.ssl.keystore.location": str(self.files / "broker.pem")}
        return settings | ({"zookeeper.set.acl": "true"} if self.kind == "zk" else {})

    def write_coord_config(self, path: pathlib.Path) -> pathlib.Path:
        """A --coord-config file of these settings."""
        path.write_text("".join(f'"{name}" = "{value}"\n' for name, value in self.settings().items()))
        return path


def _password() -> str:
    return secrets.token_urlsafe(18)


def start_secure_server(kind: str, state_dir: pathlib.Path) -> SecureServer:
    """A started secured server of `kind` ("zk" | "etcd"), its state and files under `state_dir`."""
    secure = state_dir / "server" / "secure"
    secure.mkdir(parents=True)
    files = state_dir / "client"
    files.mkdir()
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(secure / "ca.pem"))
    ca.cert_pem.write_to_path(str(files / "ca.pem"))
    ca.issue_cert("replog-script").private_key_and_cert_chain_pem.write_to_path(str(secure / "client.pem"))
    ca.issue_cert("replog-broker").private_key_and_cert_chain_pem.write_to_path(str(files / "broker.pem"))
    server = ca.issue_cert("127.0.0.1")
    if kind == "zk":
        passwords = {BROKER_USER: _password(), "admin": _password()}
        (secure / "super-user").write_text("admin\n")
        # ZooKeeper's PEM reader takes PKCS#8 keys only.
        key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None)
        (secure / "server.pem").write_bytes(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            + b"".join(blob.bytes() for blob in server.cert_chain_pems))
    else:
        passwords = {"root": _password(), BROKER_USER: _password()}
        server.cert_chain_pems[0].write_to_path(str(secure / "server.crt"))
        server.private_key_pem.write_to_path(str(secure / "server.key"))
    (secure / "users").write_text("".join(f"{name} {password}\n" for name, password in passwords.items()))
    (files / "broker.password").write_text(passwords[BROKER_USER] + "\n")
    process = ServerProcess("zookeeper" if kind == "zk" else "etcd", state_dir / "server")
    process.start()
    return SecureServer(kind, process, passwords, files)


def running_secure_server(kind: str, tmp_path_factory):
    """A fixture's body: a server of `kind` for the fixture's life."""
    server = start_secure_server(kind, tmp_path_factory.mktemp(f"secure-{kind}"))
    try:
        yield server
    finally:
        server.process.stop()


def _shared(kind: str, name: str):
    @pytest.fixture(scope="session", name=name)
    def fixture(tmp_path_factory, shared_servers):  # shared_servers: tests/conftest.py
        server = start_secure_server(kind, tmp_path_factory.mktemp(f"secure-{kind}"))
        shared_servers.append(server.process)
        return server

    return fixture


# For the conftests that import them (tests/backends, tests/cluster): one server each per run.
secure_zookeeper_server = _shared("zk", "secure_zookeeper_server")
secure_etcd_server = _shared("etcd", "secure_etcd_server")
