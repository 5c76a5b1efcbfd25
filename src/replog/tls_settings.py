"""Kafka's ssl.* settings, with the PEM names of KIP-651: what an SSL listener serves and whom it
trusts. net/tls.py builds the listener's SSL context from them.

Each may be set for one listener with Kafka's prefix, `listener.name.<lower-case name>.ssl.*`,
which wins over the unprefixed setting for that listener (`settings_of`). Key material and
passwords are Secrets: their text shows as Kafka's "[hidden]" wherever a value is printed
(logs, DescribeConfigs, error messages).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Callable


class Secret(str):
    """A password or a private key: `.text` is the value; str() and repr() hide it."""

    @property
    def text(self) -> str:
        return str.__str__(self)

    def __str__(self) -> str:
        return "[hidden]"

    __repr__ = __str__


def _secret(text: str) -> Secret | None:
    return Secret(text) if text.strip() else None


def _optional_text(text: str) -> str | None:
    return text.strip() or None


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.strip() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text.strip()

    return parse


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")


def _protocols(text: str) -> tuple[str, ...]:
    protocols = _names(text)
    if not protocols or not set(protocols) <= set(TLS_VERSIONS):
        raise ValueError(f"must name one or more of {', '.join(TLS_VERSIONS)} (older versions are not offered)")
    return protocols


SSL_SETTING_NAMES = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
    "ssl.client.auth", "ssl.enabled.protocols", "ssl.cipher.suites",
)
# name -> (parser, default, doc, is_list), as config.Setting takes them
SPECS: dict[str, tuple[Callable[[str], Any], Any, str, bool]] = {
    "ssl.keystore.type": (_one_of("PEM"), "PEM", "format of the keystore: PEM (KIP-651)", False),
    "ssl.keystore.location": (_optional_text, None,
                              "PEM file holding the listener's private key and its certificate chain", False),
    "ssl.keystore.certificate.chain": (_optional_text, None, "the certificate chain, PEM, inline", False),
    "ssl.keystore.key": (_secret, None, "the private key, PEM, inline", False),
    "ssl.key.password": (_secret, None, "password of an encrypted private key", False),
    "ssl.truststore.type": (_one_of("PEM"), "PEM", "format of the truststore: PEM (KIP-651)", False),
    "ssl.truststore.location": (_optional_text, None, "PEM file of the CA certificates client certificates are "
                                                      "checked against", False),
    "ssl.truststore.certificates": (_optional_text, None, "the CA certificates, PEM, inline", False),
    "ssl.client.auth": (_one_of("none", "requested", "required"), "none",
                        "whether clients must present a certificate the truststore's CAs signed", False),
    "ssl.enabled.protocols": (_protocols, TLS_VERSIONS, "TLS versions offered", True),
    "ssl.cipher.suites": (_names, (), "TLS 1.2 cipher suites offered, OpenSSL's names (default: Python's)", True),
}
_OVERRIDE = re.compile(r"listener\.name\.([a-z0-9_\-]+)\.(ssl\..+)")


def overridden(name: str) -> str | None:
    """The ssl.* setting that `listener.name.<listener>.ssl.*` overrides; None for any other name."""
    matched = _OVERRIDE.fullmatch(name)
    return matched[2] if matched is not None and matched[2] in SPECS else None


def settings_of(settings: Mapping[str, Any], listener: str) -> dict[str, Any]:
    """The ssl.* values of listener `listener`: its own where set, else the broker's."""
    prefix = f"listener.name.{listener.lower()}."
    return {name: settings.get(prefix + name, settings[name]) for name in SSL_SETTING_NAMES}
