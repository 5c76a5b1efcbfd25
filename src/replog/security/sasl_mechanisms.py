"""The SASL mechanisms a listener serves: a factory per mechanism name, which builds from the
listener's settings what makes a fresh MechanismServer (sasl.py) for each exchange.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from replog import sasl_settings

from . import jaas, oauthbearer, plain
from .plain import PlainServer
from .sasl import MechanismServer
from .scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramMechanism
from .scram_exchange import CredentialLookup, ScramServer


class ListenerSasl(NamedTuple):
    """What a mechanism's factory builds from."""
    listener: str  # the listener's name, as in `listeners`
    settings: Mapping[str, Any]  # the broker's settings
    scram_credential: CredentialLookup  # the store's SCRAM credentials


class SaslSettingsError(Exception):
    """A listener's SASL settings that cannot be served; the message says which and why."""


NewServer = Callable[[], MechanismServer]
MechanismFactory = Callable[[ListenerSasl], NewServer]


def jaas_config(context: ListenerSasl, mechanism: str) -> jaas.LoginModule | None:
    """The listener's `listener.name.<l>.<mechanism>.sasl.jaas.config`, parsed; None if unset."""
    text = context.settings.get(sasl_settings.jaas_config_name(context.listener, mechanism))
    if text is None:
        return None
    try:
        return jaas.login_module(text.text)
    except ValueError as error:
        raise SaslSettingsError(f"{sasl_settings.jaas_config_name(context.listener, mechanism)}: {error}") from None


def _plain(context: ListenerSasl) -> NewServer:
    path = sasl_settings.settings_of(context.settings, context.listener)["sasl.plain.users.file"]
    try:
        text = None if path is None else open(path, encoding="utf-8").read()
        users = plain.users_of(jaas_config(context, plain.PLAIN), text)
    except (OSError, ValueError) as error:  # never the file's text: it holds passwords
        raise SaslSettingsError(f"PLAIN on listener {context.listener}: {path}: {error}") from None
    if not users:
        raise SaslSettingsError(f"PLAIN on listener {context.listener} has no users: set sasl.plain.users.file or "
                         f"{sasl_settings.jaas_config_name(context.listener, plain.PLAIN)} with user_<name> options")
    return lambda: PlainServer(users)


def _scram(mechanism: ScramMechanism) -> MechanismFactory:
    return lambda context: lambda: ScramServer(mechanism, context.scram_credential)


def _oauthbearer(context: ListenerSasl) -> NewServer:
    try:
        return oauthbearer.server_factory(context.settings, context.listener)
    except ValueError as error:
        raise SaslSettingsError(str(error)) from None


FACTORIES: dict[str, MechanismFactory] = {
    plain.PLAIN: _plain,
    SCRAM_SHA_256.name: _scram(SCRAM_SHA_256),
    SCRAM_SHA_512.name: _scram(SCRAM_SHA_512),
    oauthbearer.MECHANISM: _oauthbearer,
}


def listener_mechanisms(context: ListenerSasl) -> dict[str, NewServer]:
    """The listener's enabled mechanisms, in the order set; SaslSettingsError for one not
    served or not configured, saying which."""
    enabled = sasl_settings.settings_of(context.settings, context.listener)["sasl.enabled.mechanisms"]
    unknown = [name for name in enabled if name not in FACTORIES]
    if unknown:
        raise SaslSettingsError(f"sasl.enabled.mechanisms of listener {context.listener} names {', '.join(unknown)}, which "
                         f"replog does not serve (it serves {', '.join(FACTORIES)})")
    return {name: FACTORIES[name](context) for name in enabled}
