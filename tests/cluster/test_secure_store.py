"""A broker over an authenticated store (ZooKeeper with SASL DIGEST-MD5 and znode ACLs, etcd
with an RBAC user, both over TLS with client certificates) that is given a wrong password stops
at once, saying so in one line without the password. Three brokers over these stores, their
replication, a leader killed under acks=all writes, the admin commands' store door and the
passwords kept out of logs are test_sasl_replication's secure-zk and secure-etcd clusters."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.servers import unique_root

SECURE_SERVERS = {"zk": "secure_zookeeper_server", "etcd": "secure_etcd_server"}


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
