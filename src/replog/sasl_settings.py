"""Kafka's SASL settings on the broker: which mechanisms a SASL_PLAINTEXT or SASL_SSL listener
offers, how long an authenticated session lasts, how long a failed client waits for its
connection to close, and where PLAIN's users come from. security/sasl_mechanisms.py builds each
listener's mechanism servers from them, net/sasl_session.py runs the exchanges.

Each may be set for one listener with Kafka's prefix, `listener.name.<lower-case name>.<setting>`
(`settings_of`), and a mechanism's JAAS configuration is Kafka's
`listener.name.<listener>.<lower-case mechanism>.sasl.jaas.config` (security/jaas.py reads it;
PLAIN's holds the users, `user_<name>="<password>"`). Kafka's default mechanism, GSSAPI
(Kerberos), is not served: the default is SCRAM-SHA-256 and SCRAM-SHA-512, which need nothing
but users made with `replog users create`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Callable

from replog.listener_overrides import listener_values, overridden_setting


def _mechanisms(text: str) -> tuple[str, ...]:
    names = tuple(part.strip().upper() for part in text.split(",") if part.strip())
    if not names:
        raise ValueError("must name at least one SASL mechanism")
    return names


def _milliseconds(text: str) -> int:
    if not text.strip().isdigit():
        raise ValueError("is not a whole number of milliseconds, 0 or more")
    return int(text.strip())


def _bytes(text: str) -> int:
    if not text.strip().isdigit() or int(text.strip()) < 1:
        raise ValueError("is not a whole number of bytes, 1 or more")
    return int(text.strip())


def _optional_path(text: str) -> str | None:
    return text.strip() or None


DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_SETTING_NAMES = ("sasl.enabled.mechanisms", "sasl.plain.users.file", "connections.max.reauth.ms",
                      "connection.failed.authentication.delay.ms", "sasl.server.max.receive.size")
# name -> (parser, default, doc, is_list), as config.Setting takes them
SPECS: dict[str, tuple[Callable[[str], Any], Any, str, bool]] = {
    "sasl.enabled.mechanisms": (_mechanisms, DEFAULT_MECHANISMS,
                                "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
                                "OAUTHBEARER", True),
    "sasl.plain.users.file": (_optional_path, None,
                              "file of PLAIN's users, one user=password a line (beside the PLAIN JAAS config's "
                              "user_<name> options, which it overrides)", False),
    "connections.max.reauth.ms": (_milliseconds, 0,
                                  "longest an authenticated SASL session lasts: the client re-authenticates on its "
                                  "connection before then, or the connection closes at its next request (0: no "
                                  "limit but the credential's own)", False),
    "connection.failed.authentication.delay.ms": (_milliseconds, 100,
                                                  "how long after answering a failed authentication the connection "
                                                  "is closed (KIP-306), slowing down guessing", False),
    "sasl.server.max.receive.size": (_bytes, 524_288,
                                     "largest frame a connection may send before it has authenticated: a bigger "
                                     "one closes it, so that a client without credentials cannot make the broker "
                                     "read socket.request.max.bytes", False),
}
_JAAS = re.compile(r"listener\.name\.([a-z0-9_\-]+)\.([a-z0-9\-]+)\.sasl\.jaas\.config")


def overridden(name: str) -> str | None:
    """The SASL setting that `listener.name.<listener>.<setting>` overrides; None for any other name."""
    return overridden_setting(name, SPECS)


def is_jaas_config(name: str) -> bool:
    """Whether `name` is a listener's mechanism's `sasl.jaas.config`."""
    return _JAAS.fullmatch(name) is not None


def jaas_config_name(listener: str, mechanism: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"


def settings_of(settings: Mapping[str, Any], listener: str) -> dict[str, Any]:
    """The SASL values of listener `listener`: its own where set, else the broker's."""
    return listener_values(settings, listener, SASL_SETTING_NAMES)
