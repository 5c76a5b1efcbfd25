"""Kafka's per-listener settings: `listener.name.<listener>.<setting>` wins over the broker's
`<setting>` for the connections of that listener (lower-case name), and a SASL mechanism's own,
`listener.name.<listener>.<mechanism>.<setting>`, for that mechanism on that listener. Which
settings a listener may override is each family's (tls_settings, sasl_settings, config).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

_OVERRIDE = re.compile(r"listener\.name\.[a-z0-9_\-]+\.(.+)")


def _prefix(mechanism: str) -> str:
    return f"{mechanism.lower()}." if mechanism else ""


def overridden_setting(name: str, names: Collection[str], mechanism: str = "") -> str | None:
    """The setting of `names` that `name` overrides for a listener (and `mechanism`); None if none."""
    matched = _OVERRIDE.fullmatch(name)
    if matched is None or not matched[1].startswith(_prefix(mechanism)):
        return None
    setting = matched[1][len(_prefix(mechanism)):]
    return setting if setting in names else None


def listener_values(settings: Mapping[str, Any], listener: str, names: Collection[str],
                    mechanism: str = "") -> dict[str, Any]:
    """The values of `names` for `listener` (and `mechanism`): its own where set, else the broker's."""
    prefix = f"listener.name.{listener.lower()}.{_prefix(mechanism)}"
    return {name: settings.get(prefix + name, settings[name]) for name in names}
