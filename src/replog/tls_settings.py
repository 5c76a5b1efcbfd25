"""Kafka's ssl.* settings, with the PEM names of KIP-651: what an SSL listener serves and whom it
trusts. net/tls.py builds the listener's SSL context from them.

`ssl.principal.mapping.rules` turns a client certificate's subject (its distinguished name, as
RFC 2253 writes it: "CN=app,OU=ops,O=example") into the user of the principal, with Kafka's
syntax (SslPrincipalMapper): rules tried in order, DEFAULT (the whole name) or
RULE:pattern/replacement/[LU], the pattern matching the whole name, $1... its groups, L or U
the case of the result. A name no rule matches has no principal.

Each may be set for one listener with Kafka's prefix, `listener.name.<lower-case name>.ssl.*`,
which wins over the unprefixed setting for that listener (`settings_of`). Key material and
passwords are Secrets: their text shows as Kafka's "[hidden]" wherever a value is printed
(logs, DescribeConfigs, error messages).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

from replog.listener_overrides import listener_values, overridden_setting


class Secret(str):
    """A password or a private key: `.text` is the value; str() and repr() hide it."""

    @property
    def text(self) -> str:
        return str.__str__(self)

    def __str__(self) -> str:
        return "[hidden]"

    __repr__ = __str__

    def __format__(self, spec: str) -> str:  # str's own would format the text
        return format("[hidden]", spec)


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


class PrincipalRule(NamedTuple):
    """DEFAULT when `pattern` is None."""

    pattern: re.Pattern | None
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}/{self.case}"

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        # Java's $1 is Python's \g<1>; replaceAll, as Kafka's rule.
        mapped = self.pattern.sub(re.sub(r"\$(\d+)", r"\\g<\1>", self.replacement), name)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


# Kafka's RULE_PATTERN: a rule's pattern and replacement may hold escaped slashes.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)"
_RULES = re.compile(rf"\s*(?:{_RULE}|(.*?))\s*(?:[,\n]\s*|$)")


def _principal_rules(text: str) -> tuple[PrincipalRule, ...]:
    rules = []
    for found in _RULES.finditer(text.strip()):  # bounded by the text
        if found.end() == found.start():
            break
        if found[1]:
            rules.append(PrincipalRule(None))
        elif found[2] is not None:
            try:
                rules.append(PrincipalRule(re.compile(found[2]), found[3], found[4]))
            except re.error as error:
                raise ValueError(f"has a rule whose pattern {found[2]!r} is not a regular expression: {error}") from None
        else:
            raise ValueError(f"has an invalid rule: {found[5]!r} (DEFAULT or RULE:pattern/replacement/[LU])")
    if not rules:
        raise ValueError("names no rule (DEFAULT or RULE:pattern/replacement/[LU])")
    return tuple(rules)


def principal_of(rules: tuple[PrincipalRule, ...], name: str) -> str | None:
    """The user a certificate subject `name` maps to by the first rule that applies; None if none does."""
    for rule in rules:  # bounded by the operator's rules
        mapped = rule.apply(name)
        if mapped is not None:
            return mapped
    return None


SSL_SETTING_NAMES = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
    "ssl.client.auth", "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.principal.mapping.rules",
    "ssl.endpoint.identification.algorithm",
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
    "ssl.principal.mapping.rules": (_principal_rules, (PrincipalRule(None),),
                                    "how a client certificate's subject becomes its principal's user: DEFAULT or "
                                    "RULE:pattern/replacement/[LU], comma-separated, the first that applies", False),
    "ssl.endpoint.identification.algorithm": (_one_of("https", ""), "https",
                                              "https: a broker checks that another broker's certificate names the "
                                              "host it connects to; empty: it does not", False),
}


def overridden(name: str) -> str | None:
    """The ssl.* setting that `listener.name.<listener>.ssl.*` overrides; None for any other name."""
    return overridden_setting(name, SPECS)


def settings_of(settings: Mapping[str, Any], listener: str) -> dict[str, Any]:
    """The ssl.* values of listener `listener`: its own where set, else the broker's."""
    return listener_values(settings, listener, SSL_SETTING_NAMES)
