"""The scenarios by name: each is written once, takes a Target and returns its observable
result as plain data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..targets import Target

Scenario = Callable[[Target], Any]
SCENARIOS: dict[str, Scenario] = {}


def scenario(function: Scenario) -> Scenario:
    assert function.__name__ not in SCENARIOS, f"two scenarios named {function.__name__}"
    SCENARIOS[function.__name__] = function
    return function
