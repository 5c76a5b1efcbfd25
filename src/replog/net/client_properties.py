"""A Kafka client properties file (`--command-config FILE`, as Kafka's tools take it) or the
`kafka.*` options of a Spark query: read as java.util.Properties reads a file, checked, and
turned into what replog's clients connect with, a ClientSecurity for BrokerConnection and
librdkafka settings for the tools built on confluent-kafka.

Users bring either family of names, so both are accepted: Java's (`sasl.jaas.config`,
`ssl.truststore.location` with `ssl.truststore.type=PEM`, `ssl.keystore.location` with
`ssl.keystore.type=PEM`) and librdkafka's (`sasl.username`/`sasl.password`, `ssl.ca.location`,
`ssl.certificate.location`/`ssl.key.location`, `enable.ssl.certificate.verification`). A name
neither client knows, a security setting that the protocol does not use, or two names for one
thing with different values: a one-line ClientPropertiesError naming the keys.

OAUTHBEARER: the token is read from the file that Kafka's `sasl.oauthbearer.token.endpoint.url`
names as a file: URL (KIP-768's way to present a token issued beforehand; Kafka's FileJwtRetriever
reads it), again for each authentication, so that a token rotated in the file is the one presented.
An identity provider's http(s) endpoint is not asked: the client-credentials flow is not spoken here.

Passwords and keys are tls_settings.Secret from the moment they are read, and no message here
quotes a value but the protocol's, the mechanism's and the store types', so a file's secrets
never reach an error or a log line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import ssl
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from replog.listener_settings import SASL_PROTOCOLS, SECURITY_PROTOCOLS, TLS_PROTOCOLS
from replog.security import jaas
from replog.tls_settings import Secret

from .client_security import PLAINTEXT, ClientSecurity

# GSSAPI (Kerberos) is not served.
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# The login module each mechanism's sasl.jaas.config names, as Kafka's clients check it.
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
# The login callback handler that fetches or reads tokens (Kafka 3.x's name, then 4.x's).
OAUTHBEARER_HANDLERS = ("org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
                        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler")
TOKEN_BYTES_MAX = 64 * 1024  # a JWT is a few KiB; a larger file is not one
# librdkafka asks for a token again at 80% of the lifetime it is given: a token rotated in the
# file is presented within a minute, whatever its own expiry.
TOKEN_REREAD_S = 60
STORE_TYPE = "PEM"  # KIP-651's; replog reads no JKS or PKCS12 store

# The names of one thing in either family: Java's first. A value given under both must agree.
_ALIASES = {
    "sasl.mechanism": "sasl.mechanisms",
    "ssl.truststore.location": "ssl.ca.location",
}
SECRET_KEYS = frozenset({"sasl.password", "sasl.jaas.config", "ssl.key.password"})
KNOWN_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username", "sasl.password",
    "sasl.oauthbearer.token.endpoint.url", "sasl.login.callback.handler.class",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.ca.location",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification",
})
_SASL_KEYS = ("sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username", "sasl.password",
              "sasl.oauthbearer.token.endpoint.url", "sasl.login.callback.handler.class")
_OAUTHBEARER_KEYS = ("sasl.oauthbearer.token.endpoint.url", "sasl.login.callback.handler.class")
_SSL_KEYS = tuple(sorted(key for key in KNOWN_KEYS if "ssl" in key))
# Java's ssl.endpoint.identification.algorithm is https or empty; librdkafka's https or none.
_HOSTNAME_CHECKS = {"https": True, "": False, "none": False}
_BOOLEANS = {"true": True, "false": False}


class ClientPropertiesError(ValueError):
    """One line naming the keys at fault (never a secret's value)."""


@dataclasses.dataclass(frozen=True)
class ClientProperties:
    """A client's security settings, checked; plain data, so that Spark can pickle it."""

    protocol: str = PLAINTEXT
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    token_file: str | None = None  # OAUTHBEARER's token, read for each authentication
    ca_location: str | None = None  # None: the system's CAs
    certificate_location: str | None = None  # the client's certificate chain, for mTLS
    key_location: str | None = None  # its private key; None: in the certificate's file
    key_password: Secret | None = None
    verify_certificates: bool = True
    check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    def client_security(self) -> ClientSecurity:
        """What BrokerConnection.open takes; reads the certificate files now (ClientPropertiesError
        if it cannot)."""
        token = None
        if self.token_file is not None:
            read_token(self.token_file)  # unreadable: refused now rather than at the first connection
            token = functools.partial(read_token, self.token_file)
        return ClientSecurity(protocol=self.protocol, tls=self._tls_context() if self.uses_tls else None,
                              sasl_mechanism=self.sasl_mechanism, sasl_username=self.sasl_username,
                              sasl_password=self.sasl_password, sasl_oauthbearer_token=token)

    def librdkafka(self) -> dict[str, Any]:
        """The same settings in librdkafka's names (its secrets as plain text, as it takes them);
        OAUTHBEARER's token through confluent-kafka's oauth_cb."""
        settings: dict[str, Any] = {"security.protocol": self.protocol}
        if self.token_file is not None:
            read_token(self.token_file)
            settings |= {"sasl.mechanisms": self.sasl_mechanism, "oauth_cb": functools.partial(_oauth_cb, self.token_file)}
        elif self.sasl_mechanism is not None:
            settings |= {"sasl.mechanisms": self.sasl_mechanism, "sasl.username": self.sasl_username,
                         "sasl.password": self.sasl_password.text}
        if self.uses_tls:
            settings |= {"enable.ssl.certificate.verification": str(self.verify_certificates).lower(),
                         "ssl.endpoint.identification.algorithm": "https" if self.check_hostname else "none"}
            if self.ca_location is not None:
                settings["ssl.ca.location"] = self.ca_location
            if self.certificate_location is not None:
                # A Java PEM keystore holds the key beside the chain: librdkafka reads each from it.
                settings |= {"ssl.certificate.location": self.certificate_location,
                             "ssl.key.location": self.key_location or self.certificate_location}
            if self.key_password is not None:
                settings["ssl.key.password"] = self.key_password.text
        return settings

    def _tls_context(self) -> ssl.SSLContext:
        with _naming_file("the CA certificates", self.ca_location or "the system's store"):
            context = ssl.create_default_context(cafile=self.ca_location)
        context.check_hostname = self.check_hostname and self.verify_certificates
        if not self.verify_certificates:
            context.verify_mode = ssl.CERT_NONE
        if self.certificate_location is not None:
            files = self.certificate_location + ("" if self.key_location is None else f" and {self.key_location}")
            with _naming_file("the client certificate and key", files):
                context.load_cert_chain(self.certificate_location, self.key_location,
                                        None if self.key_password is None else self.key_password.text)
        return context


@contextlib.contextmanager
def _naming_file(what: str, where: str) -> Iterator[None]:
    """An unreadable TLS file as a ClientPropertiesError naming it: OSError's reason (the file's
    name is not in load_cert_chain's), or what OpenSSL could not do (never what it read)."""
    try:
        yield
    except ssl.SSLError as error:
        raise ClientPropertiesError(f"cannot use {what} in {where}: {error.reason or error}") from None
    except OSError as error:
        raise ClientPropertiesError(f"cannot use {what} in {where}: {error.strerror}") from None


NO_PROPERTIES = ClientProperties()


def read_token(path: str) -> Secret:
    """The token in the file, its surrounding whitespace dropped, as Kafka's FileJwtRetriever
    reads it; ClientPropertiesError naming the file, never quoting it."""
    try:
        with open(path, "rb") as opened:
            raw = opened.read(TOKEN_BYTES_MAX + 1)
    except OSError as error:
        raise ClientPropertiesError(f"cannot read the OAUTHBEARER token in {path}: {error.strerror}") from None
    token = raw.decode("ascii", errors="replace").strip()
    if not token or len(raw) > TOKEN_BYTES_MAX or "\ufffd" in token:
        raise ClientPropertiesError(f"{path} does not hold one token (a JWS of at most {TOKEN_BYTES_MAX} ASCII bytes)")
    return Secret(token)


def _oauth_cb(path: str, _config: str) -> tuple[str, float]:
    return read_token(path).text, time.time() + TOKEN_REREAD_S


def read_client_properties(path: str | Path) -> ClientProperties:
    """The file's settings, checked; ClientPropertiesError names the file."""
    try:
        text = Path(path).read_text(encoding="latin-1")  # java.util.Properties.load(InputStream)'s encoding
    except OSError as error:
        raise ClientPropertiesError(f"{path}: cannot read: {error.strerror}") from None
    try:
        return client_properties(parse_properties(text))
    except ClientPropertiesError as error:
        raise ClientPropertiesError(f"{path}: {error}") from None


def client_properties(given: Mapping[str, str]) -> ClientProperties:
    """Settings by name (either family) as a ClientProperties; ClientPropertiesError naming the
    keys that are unknown, contradict each other or are missing."""
    unknown = sorted(set(given) - KNOWN_KEYS)
    if unknown:
        raise ClientPropertiesError(f"unknown client properties: {', '.join(unknown)} (known: {', '.join(sorted(KNOWN_KEYS))})")
    settings = {key: value.strip() for key, value in given.items() if key not in SECRET_KEYS}
    settings |= {key: Secret(given[key]) for key in SECRET_KEYS & set(given)}
    for java, librdkafka in _ALIASES.items():
        if java in settings and librdkafka in settings and settings[java] != settings[librdkafka]:
            raise ClientPropertiesError(f"{java} and {librdkafka} name one setting and differ; give one")
    protocol = settings.get("security.protocol", PLAINTEXT).upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ClientPropertiesError(f"security.protocol={protocol} is not one of {', '.join(SECURITY_PROTOCOLS)}")
    sasl = _sasl(settings, protocol)
    return ClientProperties(protocol, *sasl, **_tls(settings, protocol))


def _unused(settings: Mapping[str, str], keys: tuple[str, ...], user: str, what: str) -> None:
    """Refuse `keys` that `user` (a setting: name=value) has no use for."""
    given = [key for key in keys if key in settings]
    if given:
        raise ClientPropertiesError(f"{', '.join(given)} set, but {user} uses no {what}")


def _sasl(settings: Mapping[str, str], protocol: str) -> tuple[str | None, str | None, Secret | None, str | None]:
    """(mechanism, username, password, token file) from the sasl.* settings."""
    if protocol not in SASL_PROTOCOLS:
        _unused(settings, _SASL_KEYS, f"security.protocol={protocol}", "SASL")
        return None, None, None, None
    mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "")).upper()
    if mechanism not in MECHANISMS:
        shown = f"sasl.mechanism={mechanism}" if mechanism else f"security.protocol={protocol} without sasl.mechanism"
        raise ClientPropertiesError(f"{shown}: replog's clients speak {', '.join(MECHANISMS)}")
    if mechanism == "OAUTHBEARER":
        return mechanism, *_token_file(settings)
    _unused(settings, _OAUTHBEARER_KEYS, f"sasl.mechanism={mechanism}", "token")
    username, password = settings.get("sasl.username"), settings.get("sasl.password")
    if "sasl.jaas.config" in settings:
        if username is not None or password is not None:
            raise ClientPropertiesError("sasl.jaas.config and sasl.username/sasl.password both give the credentials; give one")
        username, password = _jaas_credentials(settings["sasl.jaas.config"], mechanism)
    if not username or password is None or not password.text:
        raise ClientPropertiesError(f"sasl.mechanism={mechanism} needs a username and a password: sasl.jaas.config, or "
                                    "sasl.username and sasl.password")
    return mechanism, username, password, None


def _token_file(settings: Mapping[str, str]) -> tuple[None, None, str]:
    """(username, password, token file) of OAUTHBEARER: the file of the token endpoint's file: URL."""
    given = [key for key in ("sasl.username", "sasl.password") if key in settings]
    if given:
        raise ClientPropertiesError(f"{', '.join(given)} set, but sasl.mechanism=OAUTHBEARER presents a token")
    if "sasl.jaas.config" in settings:
        _login_module(settings["sasl.jaas.config"], "OAUTHBEARER")
    handler = settings.get("sasl.login.callback.handler.class", OAUTHBEARER_HANDLERS[-1])
    if handler not in OAUTHBEARER_HANDLERS:
        raise ClientPropertiesError(f"sasl.login.callback.handler.class={handler}: replog's clients read tokens as "
                                    f"{OAUTHBEARER_HANDLERS[-1]} does")
    url = urllib.parse.urlsplit(settings.get("sasl.oauthbearer.token.endpoint.url", ""))
    if url.scheme != "file" or not url.path:
        raise ClientPropertiesError("sasl.mechanism=OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url, a file: URL "
                                    "of the token (replog's clients ask no identity provider)")
    return None, None, urllib.parse.unquote(url.path)


def _jaas_credentials(config: Secret, mechanism: str) -> tuple[str | None, Secret | None]:
    module = _login_module(config, mechanism)
    return module.options.get("username"), module.options.get("password")


def _login_module(config: Secret, mechanism: str) -> jaas.LoginModule:
    """The one login module of sasl.jaas.config, which must be the mechanism's."""
    try:
        module = jaas.login_module(config.text)
    except ValueError as error:  # Kafka's words, which quote no value
        raise ClientPropertiesError(f"sasl.jaas.config: {error}") from None
    if module.name != LOGIN_MODULES[mechanism]:
        raise ClientPropertiesError(f"sasl.jaas.config names {module.name}; sasl.mechanism={mechanism} takes "
                                    f"{LOGIN_MODULES[mechanism]}")
    return module


def _tls(settings: Mapping[str, str], protocol: str) -> dict:
    """ClientProperties' TLS fields from the ssl.* settings."""
    if protocol not in TLS_PROTOCOLS:
        _unused(settings, _SSL_KEYS, f"security.protocol={protocol}", "TLS")
        return {}
    for store in ("ssl.truststore.type", "ssl.keystore.type"):
        if settings.get(store, STORE_TYPE).upper() != STORE_TYPE:
            raise ClientPropertiesError(f"{store}={settings[store]}: replog's clients read {STORE_TYPE} files only (KIP-651)")
    keystore = settings.get("ssl.keystore.location")
    certificate, key = settings.get("ssl.certificate.location"), settings.get("ssl.key.location")
    if keystore is not None and (certificate is not None or key is not None):
        raise ClientPropertiesError("ssl.keystore.location and ssl.certificate.location/ssl.key.location both give the "
                                    "client's certificate; give one")
    if key is not None and certificate is None:
        raise ClientPropertiesError("ssl.key.location without ssl.certificate.location: the key's certificate is missing")
    if "ssl.key.password" in settings and keystore is None and key is None:
        raise ClientPropertiesError("ssl.key.password set, but no key: ssl.keystore.location or ssl.key.location")
    algorithm = settings.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in _HOSTNAME_CHECKS:
        raise ClientPropertiesError(f"ssl.endpoint.identification.algorithm={algorithm} is not https, none or empty")
    verify = settings.get("enable.ssl.certificate.verification", "true").lower()
    if verify not in _BOOLEANS:
        raise ClientPropertiesError(f"enable.ssl.certificate.verification={verify} is not true or false")
    return {
        "ca_location": settings.get("ssl.truststore.location", settings.get("ssl.ca.location")) or None,
        "certificate_location": keystore or certificate,
        "key_location": key,
        "key_password": settings.get("ssl.key.password"),
        "verify_certificates": _BOOLEANS[verify],
        "check_hostname": _HOSTNAME_CHECKS[algorithm],
    }


# -- java.util.Properties.load, for the text of a file ---------------------------------------------

# Only these end a line for Java (str.splitlines would also split at \x85, \x1c...).
_LINE_END = re.compile(r"\r\n|\r|\n")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
# The key runs to the first '=', ':' or whitespace not escaped; one '=' or ':' may follow it,
# with whitespace either side.
_KEY_VALUE = re.compile(r"((?:\\.|[^\\=:\s])*)\s*[=:]?\s*(.*)", re.DOTALL)


def parse_properties(text: str) -> dict[str, str]:
    """`key=value` (or `key: value`, `key value`) lines as java.util.Properties reads them:
    `#` and `!` comments, a line continued by an odd number of trailing backslashes (the next
    line's leading whitespace dropped), backslash escapes. A key given twice is refused, rather
    than the first value silently dropped as Java does."""
    properties: dict[str, str] = {}
    lines = _LINE_END.split(text)
    index = 0
    while index < len(lines):  # bounded: every turn consumes at least one line
        number, logical = index + 1, lines[index].lstrip(" \t\f")
        index += 1
        if not logical or logical[0] in "#!":
            continue  # a comment line is never continued
        while _continued(logical) and index < len(lines):
            logical = logical[:-1] + lines[index].lstrip(" \t\f")
            index += 1
        key, value = (_unescaped(part) for part in _KEY_VALUE.fullmatch(logical.removesuffix("\\") if _continued(logical) else logical).groups())
        if key in properties:
            raise ClientPropertiesError(f"line {number}: {key} is given twice")
        properties[key] = value
    return properties


def _continued(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescaped(text: str) -> str:
    def replace(found: re.Match) -> str:
        escaped = found[1]
        if len(escaped) == 5:
            return chr(int(escaped[1:], 16))
        return _ESCAPES.get(escaped, escaped)

    return _ESCAPE.sub(replace, text)
