"""TLS contexts: what an SSL listener serves (its certificate, the CAs it trusts for client
certificates, ssl.client.auth, the versions and ciphers it offers), and what the broker's own
clients of other brokers present and trust, built from Kafka's ssl.* settings (tls_settings.py)
of the listener.

The keystore is PEM (KIP-651): a file holding the private key and its certificate chain
(`ssl.keystore.location`), or both inline (`ssl.keystore.certificate.chain`, `ssl.keystore.key`);
the key may be encrypted (`ssl.key.password`). The truststore is a PEM file of CA certificates
(`ssl.truststore.location`) or the same inline (`ssl.truststore.certificates`). Errors name the
listener and the setting; key material and passwords never reach a message or a log.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

from cryptography import x509

from replog import tls_settings

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
# A client that connects and says nothing (or speaks plaintext to the TLS port) holds its
# connection this long at most before it is closed; well above a handshake across a slow network.
HANDSHAKE_TIMEOUT_S = 10.0


class TlsSettingsError(Exception):
    """A listener's ssl.* settings do not make a TLS context; the message says which and why."""


def server_context(settings: Mapping[str, Any], listener: str) -> ssl.SSLContext:
    """The context listener `listener` serves TLS with."""
    values = tls_settings.settings_of(settings, listener)
    context = _context(ssl.PROTOCOL_TLS_SERVER, values, listener)
    if not (values["ssl.keystore.location"] or values["ssl.keystore.certificate.chain"]):
        raise TlsSettingsError(f"listener {listener} is SSL but has no certificate: set ssl.keystore.location (a PEM "
                               "file with the private key and its certificate chain) or ssl.keystore.certificate.chain "
                               "and ssl.keystore.key")
    _load_keystore(context, values, listener)
    context.verify_mode = CLIENT_AUTH[values["ssl.client.auth"]]
    if context.verify_mode != ssl.CERT_NONE:
        if not _load_truststore(context, values, listener):
            raise TlsSettingsError(f"listener {listener}: ssl.client.auth={values['ssl.client.auth']} needs the CAs "
                                   "client certificates are checked against: set ssl.truststore.location or "
                                   "ssl.truststore.certificates")
    return context


def client_context(settings: Mapping[str, Any], listener: str) -> ssl.SSLContext:
    """The context this broker connects to other brokers' listener `listener` with: it trusts
    the listener's truststore (the system's CAs without one), checks the broker's host name
    unless ssl.endpoint.identification.algorithm is empty, and presents the listener's
    certificate, for brokers that require client certificates."""
    values = tls_settings.settings_of(settings, listener)
    context = _context(ssl.PROTOCOL_TLS_CLIENT, values, listener)
    context.check_hostname = values["ssl.endpoint.identification.algorithm"] == "https"
    if not _load_truststore(context, values, listener):
        context.load_default_certs()
    if values["ssl.keystore.location"] or values["ssl.keystore.certificate.chain"]:
        _load_keystore(context, values, listener)
    return context


def _context(protocol: int, values: Mapping[str, Any], listener: str) -> ssl.SSLContext:
    context = ssl.SSLContext(protocol)
    versions = sorted(values["ssl.enabled.protocols"])
    context.minimum_version = getattr(ssl.TLSVersion, versions[0].replace(".", "_"))
    context.maximum_version = getattr(ssl.TLSVersion, versions[-1].replace(".", "_"))
    if values["ssl.cipher.suites"]:
        try:
            context.set_ciphers(":".join(values["ssl.cipher.suites"]))
        except ssl.SSLError:
            raise TlsSettingsError(f"listener {listener}: ssl.cipher.suites names no cipher suite OpenSSL knows: "
                                   f"{','.join(values['ssl.cipher.suites'])}") from None
    return context


def _load_keystore(context: ssl.SSLContext, values: Mapping[str, Any], listener: str) -> None:
    password = values["ssl.key.password"]
    password_text = password.text if password is not None else None
    location = values["ssl.keystore.location"]
    try:
        if location:
            context.load_cert_chain(location, password=password_text)
            return
        chain, key = values["ssl.keystore.certificate.chain"], values["ssl.keystore.key"]
        if key is None:
            raise TlsSettingsError(f"listener {listener}: ssl.keystore.certificate.chain is set but ssl.keystore.key "
                                   "is not")
        _load_inline_keystore(context, chain, key.text, password_text)
    except FileNotFoundError:
        raise TlsSettingsError(f"listener {listener}: ssl.keystore.location {location} does not exist") from None
    except (ssl.SSLError, OSError) as error:
        where = f"ssl.keystore.location {location}" if location else "ssl.keystore.certificate.chain/ssl.keystore.key"
        raise TlsSettingsError(f"listener {listener}: {where} is not a PEM private key with its certificate chain, or "
                               f"ssl.key.password does not open the key ({type(error).__name__})") from None


def _load_inline_keystore(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """OpenSSL reads a chain and key only from files: a private one, gone once read."""
    with tempfile.TemporaryDirectory(prefix="replog-tls-") as directory:
        path = os.path.join(directory, "keystore.pem")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(f"{key.strip()}\n{chain.strip()}\n")
        context.load_cert_chain(path, password=password)


def _load_truststore(context: ssl.SSLContext, values: Mapping[str, Any], listener: str) -> bool:
    """Whether the listener names a truststore (loaded)."""
    location, inline = values["ssl.truststore.location"], values["ssl.truststore.certificates"]
    try:
        if location:
            context.load_verify_locations(cafile=location)
        elif inline:
            context.load_verify_locations(cadata=inline)
        else:
            return False
    except (ssl.SSLError, OSError) as error:
        where = f"ssl.truststore.location {location}" if location else "ssl.truststore.certificates"
        raise TlsSettingsError(f"listener {listener}: {where} holds no PEM certificates ({type(error).__name__}: "
                               f"{error})") from None
    return True


def served_certificate(settings: Mapping[str, Any], listener: str) -> tuple[str, float]:
    """(subject, notAfter as a Unix time) of the certificate listener `listener` serves: the
    first of its keystore's chain."""
    values = tls_settings.settings_of(settings, listener)
    location = values["ssl.keystore.location"]
    try:
        if location:
            with open(location, "rb") as file:
                pem = file.read()
        else:
            pem = values["ssl.keystore.certificate.chain"].encode()
        leaf = x509.load_pem_x509_certificates(pem)[0]
    except (OSError, ValueError) as error:
        raise TlsSettingsError(f"listener {listener}: the keystore's certificate cannot be read "
                               f"({type(error).__name__})") from None
    return leaf.subject.rfc4514_string(), leaf.not_valid_after_utc.timestamp()
