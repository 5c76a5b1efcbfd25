"""What a broker authenticates to the other brokers with: the inter-broker listener's
mechanism (`sasl.mechanism.inter.broker.protocol`) and the username and password of that
listener's JAAS configuration for it, or the password of `sasl.inter.broker.password.file`
(inter_broker_settings.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from replog import listener_settings, sasl_settings
from replog.tls_settings import Secret

from . import jaas


class BrokerCredentials(NamedTuple):
    mechanism: str
    username: str
    password: Secret


def credentials(settings: Mapping[str, Any]) -> BrokerCredentials | None:
    """What this broker authenticates to the others with; None when the inter-broker listener
    is not a SASL one, or its JAAS configuration for the mechanism is not set (a broker alone
    needs none; a broker of a cluster cannot fetch without). ValueError says what is wrong, naming
    settings, never a value."""
    listener = settings["inter.broker.listener.name"]
    mechanism = settings["sasl.mechanism.inter.broker.protocol"]
    setting = sasl_settings.jaas_config_name(listener, mechanism)
    if listener_settings.security_protocol(settings, listener) not in listener_settings.SASL_PROTOCOLS or settings.get(setting) is None:
        return None
    enabled = sasl_settings.settings_of(settings, listener)["sasl.enabled.mechanisms"]
    if mechanism not in enabled:
        raise ValueError(f"sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL "
                         f"is used for inter-broker communication: {mechanism} is not among {', '.join(enabled)} of "
                         f"listener {listener}")
    options = jaas.login_module(settings[setting].text).options
    username, password = options.get("username"), options.get("password")
    password_file = settings["sasl.inter.broker.password.file"]
    if password_file is not None:
        password = _first_line(password_file)
    if not username or not password:
        raise ValueError(f"{setting} must name this broker's username and password (or give the password in "
                         "sasl.inter.broker.password.file)")
    return BrokerCredentials(mechanism, username, Secret(getattr(password, "text", password)))


def _first_line(path: str) -> Secret:
    try:
        with open(path, encoding="utf-8") as file:
            return Secret(file.readline().rstrip("\r\n"))
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"sasl.inter.broker.password.file: cannot read {path}: {type(error).__name__}") from None

