"""How brokers authenticate to each other, in Kafka's names, and whom a broker takes for one.

    sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512     (with a SASL inter-broker listener)
    listener.name.replication.scram-sha-512.sasl.jaas.config=\
        org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="...";
    sasl.inter.broker.password.file=/etc/replog/broker.password   (replog's: the password, not in the config)
    super.users=User:broker;User:admin

A broker connects to the others' inter-broker listener with the mechanism named and the
username and password of that listener's JAAS configuration for it (sasl_settings), as Kafka's
brokers do; the password may come from a file instead, its first line
(security/inter_broker.py reads them). Kafka's default
mechanism, GSSAPI, is not served: the default is SCRAM-SHA-512, the strongest replog serves that
needs nothing but users in the store. OAUTHBEARER needs a token provider a broker does not have.

`super.users` (Kafka's syntax, principals separated by ';'): who may act as a broker, that is
fetch as a follower and ask OffsetForLeaderEpoch as a replica; what Kafka's authorizer grants
them through CLUSTER_ACTION. Empty: anyone, as Kafka without an authorizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

INTER_BROKER_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _mechanism(text: str) -> str:
    mechanism = text.strip().upper()
    if mechanism not in INTER_BROKER_MECHANISMS:
        raise ValueError(f"must be one of {', '.join(INTER_BROKER_MECHANISMS)} (GSSAPI is not served; OAUTHBEARER "
                         "needs a token provider brokers do not have)")
    return mechanism


def _optional_path(text: str) -> str | None:
    return text.strip() or None


def _principals(text: str) -> tuple[str, ...]:
    principals = tuple(part.strip() for part in text.split(";") if part.strip())
    for principal in principals:
        kind, colon, name = principal.partition(":")
        if not colon or not kind or not name:
            raise ValueError(f"names {principal!r}, not a principal Type:name (e.g. User:broker; several separated "
                             "by ';')")
    return principals


# name -> (parser, default, doc, is_list), as config.Setting takes them
SPECS: dict[str, tuple[Callable[[str], Any], Any, str, bool]] = {
    "sasl.mechanism.inter.broker.protocol": (_mechanism, "SCRAM-SHA-512",
                                             "SASL mechanism brokers authenticate to each other with, on a SASL "
                                             "inter-broker listener", False),
    "sasl.inter.broker.password.file": (_optional_path, None,
                                        "file whose first line is the password this broker authenticates to other "
                                        "brokers with (instead of the JAAS config's password option)", False),
    "super.users": (_principals, (), "principals that may act as brokers (fetch as followers), separated by ';' "
                                     "(empty: anyone)", True),
}


def acts_as_broker(settings: Mapping[str, Any], principal: str) -> bool:
    """Whether `principal` may do what only brokers do (see the module): one of super.users, or
    anyone while super.users is empty."""
    super_users = settings["super.users"]
    return not super_users or principal in super_users
