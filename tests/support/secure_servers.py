"""Secured ZooKeeper and etcd servers for the tests of the authenticated store: the users,
passwords and certificates their scripts' secured modes read (scripts/zookeeper.sh,
scripts/etcd.sh), made here, and the settings a broker or a tool connects with.

ZooKeeper: SASL DIGEST-MD5 users `broker` and `admin` (ZooKeeper's super user). etcd: TLS with
client certificates from a CA made here, users `root` and `broker` (role replog), auth enabled.
"""

from __future__ import annotations

import dataclasses
import pathlib
import secrets

import pytest
import trustme

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
        if self.kind == "zk":
            return StoreSecurity(username=BROKER_USER, password=password, set_acl=True)
        return StoreSecurity(username=BROKER_USER, password=password, tls=True, truststore_location=str(self.files / "ca.pem"),
                             keystore_location=str(self.files / "broker.pem"))

    def settings(self) -> dict[str, str]:
        """The same, as broker settings."""
        common = {"coord.username": BROKER_USER, "coord.password.file": str(self.password_file)}
        if self.kind == "zk":
            return common | {"zookeeper.set.acl": "true"}
        return common | {"coord.ssl.client.enable": "true", "coord.ssl.truststore.location": str(self.files / "ca.pem"),
                         "coord.ssl.keystore.location": str(self.files / "broker.pem")}

    def write_coord_config(self, path: pathlib.Path) -> pathlib.Path:
        """A --coord-config file of these settings."""
        path.write_text("".join(f'"{name}" = "{value}"\n' for name, value in self.settings().items()))
        return path


def _password() -> str:
    return secrets.token_urlsafe(18)


def start_secure_server(kind: str, state_dir: pathlib.Path, auth_token_ttl_s: int | None = None) -> SecureServer:
    """A started secured server of `kind` ("zk" | "etcd"), its state and files under `state_dir`."""
    secure = state_dir / "server" / "secure"
    secure.mkdir(parents=True)
    files = state_dir / "client"
    files.mkdir()
    if kind == "zk":
        passwords = {BROKER_USER: _password(), "admin": _password()}
        (secure / "super-user").write_text("admin\n")
    else:
        passwords = {"root": _password(), BROKER_USER: _password()}
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(secure / "ca.pem"))
        ca.cert_pem.write_to_path(str(files / "ca.pem"))
        server = ca.issue_cert("127.0.0.1")
        server.cert_chain_pems[0].write_to_path(str(secure / "server.crt"))
        server.private_key_pem.write_to_path(str(secure / "server.key"))
        ca.issue_cert("replog-script").private_key_and_cert_chain_pem.write_to_path(str(secure / "client.pem"))
        ca.issue_cert("replog-broker").private_key_and_cert_chain_pem.write_to_path(str(files / "broker.pem"))
        if auth_token_ttl_s is not None:
            (secure / "auth-token-ttl").write_text(f"{auth_token_ttl_s}\n")
    (secure / "users").write_text("".join(f"{name} {password}\n" for name, password in passwords.items()))
    (files / "broker.password").write_text(passwords[BROKER_USER] + "\n")
    process = ServerProcess("zookeeper" if kind == "zk" else "etcd", state_dir / "server")
    process.start()
    return SecureServer(kind, process, passwords, files)


def _secure_server(kind: str, tmp_path_factory):
    server = start_secure_server(kind, tmp_path_factory.mktemp(f"secure-{kind}"))
    try:
        yield server
    finally:
        server.process.stop()


# Fixtures for the conftests that import them (tests/backends, tests/cluster).
@pytest.fixture(scope="session")
def secure_zookeeper_server(tmp_path_factory):
    """ZooKeeper with SASL DIGEST-MD5 users."""
    yield from _secure_server("zk", tmp_path_factory)


@pytest.fixture(scope="session")
def secure_etcd_server(tmp_path_factory):
    """etcd over TLS with client certificates, auth enabled."""
    yield from _secure_server("etcd", tmp_path_factory)
