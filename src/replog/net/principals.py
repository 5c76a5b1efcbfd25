"""Who a connection's requests come from: Kafka's principals. A client of a PLAINTEXT
listener, or of an SSL one without a certificate, is User:ANONYMOUS; one that presented a
certificate the listener's truststore verified is the user its subject maps to by the
listener's ssl.principal.mapping.rules (tls_settings.py; DEFAULT: the whole distinguished name,
as Kafka writes it, RFC 2253: "CN=app,OU=ops,O=example"). A subject no rule maps has no
principal: its connection is refused, as Kafka fails its authentication."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cryptography import x509

from replog.tls_settings import PrincipalRule, principal_of

from .codec import ANONYMOUS


def certificate_principals(rules: tuple[PrincipalRule, ...]) -> Callable[[asyncio.BaseTransport], str | None]:
    """The principal of a TLS connection, read from its transport once the handshake is done."""
    def identify(transport: asyncio.BaseTransport) -> str | None:
        ssl_object = transport.get_extra_info("ssl_object")
        certificate = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not certificate:
            return ANONYMOUS
        try:
            subject = x509.load_der_x509_certificate(certificate).subject.rfc4514_string()
        except ValueError:  # verified by OpenSSL, yet not X.509 that cryptography reads: no principal
            return None
        user = principal_of(rules, subject)
        return None if user is None else f"User:{user}"

    return identify
