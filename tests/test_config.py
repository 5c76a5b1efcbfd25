"""Settings are parsed and validated in one place, with errors naming the setting."""

from __future__ import annotations

import pytest

from replog.config import ConfigError, defaults, parse_setting


def test_defaults():
    assert defaults()["coord.url"] == "memory://"
    assert defaults()["coord.session.timeout.ms"] == 18_000


def test_values_are_parsed():
    assert parse_setting("coord.session.timeout.ms", "6000") == 6000
    assert parse_setting("coord.url", "zk://127.0.0.1:2181/replog") == "zk://127.0.0.1:2181/replog"


@pytest.mark.parametrize(
    "name, text, complaint",
    [
        ("no.such.setting", "1", "unknown setting 'no.such.setting'"),
        ("coord.session.timeout.ms", "soon", "coord.session.timeout.ms"),
        ("coord.session.timeout.ms", "10", "at least 1000"),
        ("coord.url", "ftp://x", "accepted forms"),
    ],
)
def test_bad_values_name_the_setting(name, text, complaint):
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")) as caught:
        parse_setting(name, text)
    assert complaint in str(caught.value)
