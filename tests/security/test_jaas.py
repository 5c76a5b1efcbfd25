"""sasl.jaas.config values read as Kafka's JaasConfig reads them, secrets kept hidden."""

from __future__ import annotations

import pytest

from replog.security.jaas import LoginModule, login_module, parse
from replog.tls_settings import Secret

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_a_client_login_module_with_quoted_username_and_password():
    module = login_module(f'{SCRAM} required username="alice" password="alice-secret";')
    assert module == LoginModule(SCRAM, "required", {"username": "alice", "password": "alice-secret"})
    assert isinstance(module.options["password"], Secret)
    assert module.options["password"].text == "alice-secret"
    assert "alice-secret" not in repr(module) and "alice-secret" not in f"{module}"


def test_plain_users_on_the_broker_are_secrets():
    module = login_module(f'{PLAIN} required username="admin" password="admin-secret"\n'
                          f'  user_admin="admin-secret" user_alice="alice-secret";')
    assert set(module.options) == {"username", "password", "user_admin", "user_alice"}
    assert all(isinstance(module.options[key], Secret) for key in ("password", "user_admin", "user_alice"))
    assert not isinstance(module.options["username"], Secret)


def test_words_single_quotes_flags_in_any_case_and_comments():
    module = login_module(f"{SCRAM} REQUIRED /* block */ username=bob // to the line end\n"
                          f"  password='p w;=d' tokenauth=true;")
    assert module == LoginModule(SCRAM, "required", {"username": "bob", "password": "p w;=d", "tokenauth": "true"})


def test_escapes_inside_quotes_as_java_reads_them():
    module = login_module(SCRAM + r' required password="a\"b\\c\n\101\7x\q";')
    assert module.options["password"].text == 'a"b\\c\nA\x07xq'


def test_no_options_and_several_modules():
    assert parse(f"{SCRAM} optional; {PLAIN} sufficient a=b;") == (
        LoginModule(SCRAM, "optional", {}), LoginModule(PLAIN, "sufficient", {"a": "b"}))


@pytest.mark.parametrize("text, message", [
    ("", "Login module not specified in JAAS config"),
    ("  /* only a comment */ ", "Login module not specified in JAAS config"),
    (SCRAM, "Login module control flag not specified in JAAS config"),
    (f"{SCRAM} mandatory;", "Invalid login module control flag 'mandatory' in JAAS config"),
    (f'{SCRAM} required username="alice"', "JAAS config entry not terminated by semi-colon"),
    (f"{SCRAM} required username;", "Value not specified for key 'username' in JAAS config"),
    (f"{SCRAM} required username=;", "Value not specified for key 'username' in JAAS config"),
    (f"{SCRAM} required; {PLAIN} required;", "JAAS config property contains 2 login modules, should be 1 module"),
])
def test_malformed_values_get_kafkas_messages(text, message):
    with pytest.raises(ValueError) as raised:
        login_module(text)
    assert str(raised.value) == message


def test_an_error_never_quotes_a_password():
    with pytest.raises(ValueError) as raised:
        login_module(f'{SCRAM} required password="hunter2" username')
    assert "hunter2" not in str(raised.value)
