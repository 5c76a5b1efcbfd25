"""Through the store (--coord), a broker is asked what only it knows at its listener of the
command's security.protocol (--command-config), where its registration names one."""

from __future__ import annotations

from replog.cli.store_admin import _listener_address
from replog.coord_backends.paths import BrokerRegistration

REGISTRATION = BrokerRegistration(
    "127.0.0.1", 9094, endpoints=("CLIENT://127.0.0.1:9092", "SECURE://127.0.0.1:9093", "BROKER://127.0.0.1:9094"),
    listener_security_protocol_map={"CLIENT": "PLAINTEXT", "SECURE": "SASL_SSL", "BROKER": "SSL"})


def test_the_listener_of_the_commands_protocol_is_the_one_asked():
    assert _listener_address(REGISTRATION, "SASL_SSL") == ("127.0.0.1", 9093)
    assert _listener_address(REGISTRATION, "PLAINTEXT") == ("127.0.0.1", 9092)


def test_without_one_of_that_protocol_the_inter_broker_listener_is_asked():
    assert _listener_address(REGISTRATION, "SASL_PLAINTEXT") == ("127.0.0.1", 9094)
    assert _listener_address(BrokerRegistration("127.0.0.1", 9092), "SSL") == ("127.0.0.1", 9092)
