"""Kafka's listener settings: what each listener is called, where it binds, what it tells
clients, and which security protocol it speaks; parsed and cross-checked as Kafka's
KafkaConfig does, in Kafka's words where Kafka has them.

    listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093
    listener.security.protocol.map=CLIENT:SSL,REPLICATION:PLAINTEXT   (names other than the protocols')
    advertised.listeners=SSL://broker1.example:9093                   (default: each listener's own address)
    inter.broker.listener.name=REPLICATION                            (default: PLAINTEXT, else the first)

A listener written without NAME:// (`--listen 127.0.0.1:9092`) is the PLAINTEXT one. Names are
upper-cased, as Kafka's ListenerName.normalised does. Port 0 binds a free port (tests), and
is what a listener advertises until it has bound. The parsers raise ValueError phrased to follow
the value; config.py names the setting.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any, NamedTuple

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
# Kafka's default listener.security.protocol.map: each protocol is a listener name for itself.
DEFAULT_PROTOCOL_MAP = ",".join(f"{protocol}:{protocol}" for protocol in SECURITY_PROTOCOLS)


class Endpoint(NamedTuple):
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


class ListenerProtocol(NamedTuple):
    name: str
    protocol: str

    def __str__(self) -> str:
        return f"{self.name}:{self.protocol}"


def _endpoint(text: str, minimum_port: int) -> Endpoint:
    name, separator, address = text.strip().rpartition("://")
    name = name.strip().upper() if separator else "PLAINTEXT"
    if separator and not name:
        raise ValueError("names a listener without a name before ://")
    host, colon, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdigit() or not minimum_port <= int(port) <= 65535:
        raise ValueError(f"must be NAME://host:port (or host:port for PLAINTEXT) with a port from {minimum_port} to 65535")
    return Endpoint(name, host, int(port))


def _endpoints(text: str, minimum_port: int) -> tuple[Endpoint, ...]:
    endpoints = tuple(_endpoint(part, minimum_port) for part in text.split(",") if part.strip())
    if not endpoints:
        raise ValueError("must name at least one listener")
    names = [endpoint.name for endpoint in endpoints]
    if len(set(names)) < len(names):
        raise ValueError(f"Each listener must have a different name, listeners: {text.strip()}")
    ports = [endpoint.port for endpoint in endpoints if endpoint.port != 0]  # 0: each binds its own free port
    if len(set(ports)) < len(ports):
        raise ValueError(f"Each listener must have a different port, listeners: {text.strip()}")
    return endpoints


def listeners(text: str) -> tuple[Endpoint, ...]:
    return _endpoints(text, minimum_port=0)


def advertised_listeners(text: str) -> tuple[Endpoint, ...] | None:
    """Empty: each listener's own address."""
    return _endpoints(text, minimum_port=1) if text.strip() else None


def protocol_map(text: str) -> tuple[ListenerProtocol, ...]:
    pairs = []
    for entry in (part.strip() for part in text.split(",") if part.strip()):
        name, colon, protocol = entry.partition(":")
        if not colon or not name.strip():
            raise ValueError("is not NAME:PROTOCOL pairs, comma-separated (e.g. CLIENT:SSL,REPLICATION:PLAINTEXT)")
        if protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"maps {name.strip()} to {protocol.strip()!r}, not one of {', '.join(SECURITY_PROTOCOLS)}")
        pairs.append(ListenerProtocol(name.strip().upper(), protocol.strip().upper()))
    names = [pair.name for pair in pairs]
    if len(set(names)) < len(names):
        raise ValueError("maps a listener name twice")
    return tuple(pairs)


def listener_name(text: str) -> str | None:
    """Empty: the default (PLAINTEXT, else the first listener)."""
    return text.strip().upper() or None


def resolve(values: MutableMapping[str, Any]) -> None:
    """Check the listener settings against each other and fill in the defaults that depend on
    the others (advertised.listeners, inter.broker.listener.name); ValueError says what is wrong,
    as Kafka's KafkaConfig.validateValues does."""
    bound = values["listeners"]
    protocols = dict(values["listener.security.protocol.map"])
    for endpoint in bound:
        if endpoint.name not in protocols:
            raise ValueError(f"No security protocol defined for listener {endpoint.name}")
    advertised = values["advertised.listeners"]
    if advertised is None:
        advertised = bound
    bound_names = [endpoint.name for endpoint in bound]
    unknown = [endpoint.name for endpoint in advertised if endpoint.name not in bound_names]
    if unknown:
        raise ValueError(f"advertised.listeners listener names must be equal to or a subset of the ones defined in "
                         f"listeners. Found {','.join(unknown)}. The valid options based on the current configuration "
                         f"are {','.join(bound_names)}")
    if any(endpoint.host == "0.0.0.0" for endpoint in advertised):
        raise ValueError("advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP "
                         "address.")
    inter_broker = values["inter.broker.listener.name"]
    if inter_broker is None:
        inter_broker = "PLAINTEXT" if "PLAINTEXT" in bound_names else bound_names[0]
    advertised_names = [endpoint.name for endpoint in advertised]
    if inter_broker not in advertised_names:
        raise ValueError(f"inter.broker.listener.name must be a listener name defined in advertised.listeners. The "
                         f"valid options based on currently configured listeners are {','.join(advertised_names)}")
    values["advertised.listeners"] = advertised
    values["inter.broker.listener.name"] = inter_broker


def security_protocol(settings: Mapping[str, Any], name: str) -> str:
    return dict(settings["listener.security.protocol.map"])[name]
