"""How one of replog's own clients connects to a broker: Kafka's `security.protocol`, the TLS
context for SSL and SASL_SSL, and for SASL the mechanism and the credentials it presents. The
broker's followers build one from the inter-broker listener's settings; the tools and the Spark
connector from a Kafka client properties file or options."""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Callable

from replog.listener_settings import SECURITY_PROTOCOLS, TLS_PROTOCOLS
from replog.tls_settings import Secret

PLAINTEXT = "PLAINTEXT"


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    protocol: str = PLAINTEXT  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    tls: ssl.SSLContext | None = None  # for SSL and SASL_SSL
    sasl_mechanism: str | None = None  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | OAUTHBEARER
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    # OAUTHBEARER: called for each authentication, returns the compact JWS the client presents.
    sasl_oauthbearer_token: Callable[[], Secret] | None = None

    def __post_init__(self) -> None:
        # A TLS protocol without a context would connect in the clear, unnoticed.
        if self.protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security.protocol {self.protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
        if (self.tls is not None) != (self.protocol in TLS_PROTOCOLS):
            raise ValueError(f"security.protocol {self.protocol} {'needs' if self.tls is None else 'takes no'} TLS context")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


NO_SECURITY = ClientSecurity()
