"""What a broker authenticates to the others with (security/inter_broker.py): the inter-broker
listener's JAAS configuration for sasl.mechanism.inter.broker.protocol, its password or
sasl.inter.broker.password.file's, checked as Kafka checks them."""

from __future__ import annotations

import pytest

from replog.config import load_broker_config
from replog.security.inter_broker import credentials

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="{password}";'
SECRET = "s3cret-broker-19"


def config(**settings: str):
    return load_broker_config(None, {"listeners": "REPLICATION://127.0.0.1:0",
                                     "listener.security.protocol.map": "REPLICATION:SASL_SSL", **settings})


def test_the_listeners_jaas_config_for_the_mechanism_gives_username_and_password():
    found = credentials(config(**{"listener.name.replication.scram-sha-512.sasl.jaas.config": SCRAM_JAAS.format(password=SECRET)}))
    assert (found.mechanism, found.username, found.password.text) == ("SCRAM-SHA-512", "broker", SECRET)
    assert SECRET not in repr(found)


def test_the_password_file_wins_over_the_jaas_password(tmp_path):
    password_file = tmp_path / "broker.password"
    password_file.write_text(f"{SECRET}\n")
    found = credentials(config(**{
        "listener.name.replication.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=broker;",
        "sasl.inter.broker.password.file": str(password_file)}))
    assert found.password.text == SECRET


def test_no_credentials_on_a_listener_without_sasl_or_without_jaas_config():
    assert credentials(load_broker_config(None, {})) is None
    assert credentials(config()) is None


@pytest.mark.parametrize("settings, message", [
    ({"sasl.enabled.mechanisms": "PLAIN"}, "must be included in sasl.enabled.mechanisms"),
    ({"listener.name.replication.scram-sha-512.sasl.jaas.config":
      "org.apache.kafka.common.security.scram.ScramLoginModule required username=broker;"}, "username and password"),
    ({"sasl.inter.broker.password.file": "/nonexistent/broker.password"}, "cannot read /nonexistent/broker.password"),
])
def test_inconsistent_settings_are_refused_without_quoting_a_password(settings, message):
    settings = {"listener.name.replication.scram-sha-512.sasl.jaas.config": SCRAM_JAAS.format(password=SECRET), **settings}
    with pytest.raises(ValueError, match=message) as refused:
        credentials(config(**settings))
    assert SECRET not in str(refused.value)
