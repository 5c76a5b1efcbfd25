"""The SASL mechanisms a listener serves: a factory per mechanism name, which builds from the
listener's settings what makes a fresh MechanismServer (sasl.py) for each exchange.
"""

from __future__ import annotations

from collections.abc import Callable

from replog import sasl_settings

from . import jaas, oauthbearer, plain
from .plain import PlainServer
from .sasl import ListenerSasl, MechanismServer, SaslSettingsError
from .scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramMechanism
from .scram_exchange import ScramServer


NewServer = Callable[[], MechanismServer]
MechanismFactory = Callable[[ListenerSasl], NewServer]


def _plain(context: ListenerSasl) -> NewServer:
    path = sasl_settings.settings_of(context.settings, context.listener)["sasl.plain.users.file"]
    try:
        text = None if path is None else open(path, encoding="utf-8").read()
        users = plain.users_of(jaas.listener_login_module(context, plain.PLAIN), text)
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
