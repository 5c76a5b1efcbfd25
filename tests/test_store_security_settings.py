"""The settings of the connection to the coordination store (config.store_security): the user
and password from settings, a file or the environment, never from a URL nor shown by one."""

from __future__ import annotations

import pytest

from replog.config import ConfigError, load_broker_config, store_security
from replog.coord_backends import BadStoreUrl, StoreSecurity, open_store


def test_the_password_comes_from_its_file_and_is_never_printed(tmp_path):
    (tmp_path / "password").write_text("s3cret-line\nignored\n")
    config = load_broker_config(overrides={"coord.username": "broker", "coord.password.file": str(tmp_path / "password"),
                                           "zookeeper.set.acl": "true"})
    security = store_security(config, environ={})
    assert (security.username, security.password.text, security.set_acl) == ("broker", "s3cret-line", True)
    assert "s3cret" not in f"{security!r} {security.password} {security.password:>20}"


def test_the_environment_gives_what_the_settings_leave_out(tmp_path):
    environ = {"REPLOG_COORD_USERNAME": "from-env", "REPLOG_COORD_PASSWORD": "env-password"}
    security = store_security(load_broker_config(), environ=environ)
    assert (security.username, security.password.text) == ("from-env", "env-password")
    (tmp_path / "password").write_text("file-password")
    config = load_broker_config(overrides={"coord.username": "broker", "coord.password.file": str(tmp_path / "password")})
    assert store_security(config, environ=environ) == StoreSecurity("broker", "file-password")
    assert store_security(load_broker_config(), environ={}) == StoreSecurity()


@pytest.mark.parametrize("overrides, message", [
    ({"coord.username": "broker", "coord.password.file": "/nonexistent/password"},
     "coord.password.file: cannot read /nonexistent/password"),
    ({"coord.username": "broker"}, "a store user needs a password"),
    ({"zookeeper.set.acl": "true"}, "zookeeper.set.acl needs a store user"),
    ({"coord.ssl.truststore.location": "/"}, "coord.ssl.client.enable is false"),
    ({"coord.ssl.client.enable": "true", "coord.ssl.keystore.location": "/nonexistent/client.pem"},
     "coord.ssl.keystore.location: cannot read /nonexistent/client.pem"),
])
def test_settings_that_cannot_work_are_refused_naming_them(overrides, message):
    with pytest.raises(ConfigError, match=message):
        store_security(load_broker_config(overrides=overrides), environ={})


def test_a_url_with_a_password_is_refused_without_showing_it():
    with pytest.raises(ConfigError) as refused:
        load_broker_config(overrides={"coord.url": "zk://replog:hunter2@127.0.0.1:2181/replog"})
    assert "a user or password in the URL is refused" in str(refused.value)
    assert "hunter2" not in str(refused.value) and "[hidden]@127.0.0.1:2181" in str(refused.value)


@pytest.mark.parametrize("url, refusal", [
    ("memory://", "the embedded store takes no user"),
    ("etcd://127.0.0.1:2379/replog", "zookeeper.set.acl applies to ZooKeeper"),
])
def test_security_a_store_cannot_use_is_refused(url, refusal):
    with pytest.raises(BadStoreUrl, match=refusal):
        open_store(url, security=StoreSecurity("broker", "password", set_acl=True))
