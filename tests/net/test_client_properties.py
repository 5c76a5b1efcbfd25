"""A Kafka client properties file, read as Java reads it and checked: both families of names
(Java's and librdkafka's) give the same ClientSecurity and librdkafka settings, anything
unknown or contradictory is one line naming the keys, and no message holds a secret."""

from __future__ import annotations

import pickle
import ssl

import pytest

from replog.net.client_properties import (
    NO_PROPERTIES,
    ClientProperties,
    ClientPropertiesError,
    client_properties,
    parse_properties,
    read_client_properties,
)
from tests.support.secured_broker import tls  # noqa: F401  (a fixture)

PASSWORD = "s3cret-Pa55"
SCRAM_JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{PASSWORD}";'
PLAIN_JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="{PASSWORD}";'


def test_the_text_is_read_as_java_util_properties_reads_it():
    # Expected values as Java 17's Properties.load gave them for this very text.
    text = (
        "# comment\n! also\n  security.protocol = SASL_SSL\nsasl.mechanism:SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" \\\n    password="pa\\\\ss";\n'
        "key\\ with\\=odd\\:chars   value with spaces  \nempty\nuni=\\u00e9t\\u00E9\\tx\n"
        "back=ends with two \\\\\\\\\nnext=line\n   # not=a comment? \ncont=a\\\n# still value\r\ntrail=x\\"
    )
    assert parse_properties(text) == {
        "back": "ends with two \\\\",
        "cont": "a# still value",
        "empty": "",
        "key with=odd:chars": "value with spaces  ",
        "next": "line",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="pa\\ss";',
        "sasl.mechanism": "SCRAM-SHA-512",
        "security.protocol": "SASL_SSL",
        "trail": "x",
        "uni": "été\tx",
    }


def test_a_key_given_twice_is_refused_with_its_line():
    with pytest.raises(ClientPropertiesError, match=r"^line 3: sasl.password is given twice$"):
        parse_properties(f"sasl.password={PASSWORD}\n\nsasl.password=other\n")


@pytest.mark.parametrize("given", [
    {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM_JAAS},
    {"security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORD},
], ids=["java", "librdkafka"])
def test_either_family_of_names_gives_the_same_credentials(given):
    properties = client_properties(given)
    assert properties == ClientProperties("SASL_SSL", "SCRAM-SHA-512", "alice", PASSWORD)
    assert properties.librdkafka() == {
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
        "sasl.password": PASSWORD, "enable.ssl.certificate.verification": "true",
        "ssl.endpoint.identification.algorithm": "https",
    }
    security = properties.client_security()
    assert (security.protocol, security.sasl_mechanism, security.sasl_username) == ("SASL_SSL", "SCRAM-SHA-512", "alice")
    assert security.sasl_password.text == PASSWORD and str(security.sasl_password) == "[hidden]"
    assert security.tls.verify_mode == ssl.CERT_REQUIRED and security.tls.check_hostname


def test_plain_takes_plain_login_module_over_sasl_plaintext():
    properties = client_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                    "sasl.jaas.config": PLAIN_JAAS})
    assert properties.librdkafka() == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                                       "sasl.username": "alice", "sasl.password": PASSWORD}
    assert properties.client_security().tls is None


OAUTHBEARER_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


def test_an_oauthbearer_token_is_read_from_its_file_for_each_authentication(tmp_path):
    token_file = tmp_path / "token.jwt"
    token_file.write_text("first.token.jws\n")
    properties = client_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": OAUTHBEARER_JAAS,
        "sasl.login.callback.handler.class": HANDLER, "sasl.oauthbearer.token.endpoint.url": token_file.as_uri()})
    assert properties == ClientProperties("SASL_SSL", "OAUTHBEARER", token_file=str(token_file))
    token = properties.client_security().sasl_oauthbearer_token
    oauth_cb = properties.librdkafka()["oauth_cb"]
    assert token().text == "first.token.jws" and str(token()) == "[hidden]"
    assert oauth_cb("")[0] == "first.token.jws"
    token_file.write_text("rotated.token.jws")
    assert token().text == oauth_cb("")[0] == "rotated.token.jws"
    assert properties.librdkafka()["sasl.mechanisms"] == "OAUTHBEARER"


def test_an_oauthbearer_token_file_that_holds_no_token_is_named_not_quoted(tmp_path):
    token_file = tmp_path / "token.jwt"
    properties = client_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                                    "sasl.oauthbearer.token.endpoint.url": token_file.as_uri()})
    with pytest.raises(ClientPropertiesError, match=f"^cannot read the OAUTHBEARER token in {token_file}: No such file"):
        properties.client_security()
    token_file.write_text(" \n")
    with pytest.raises(ClientPropertiesError, match=f"^{token_file} does not hold one token"):
        properties.librdkafka()


def test_a_java_pem_keystore_and_librdkafka_files_name_one_client_certificate(tls):  # noqa: F811
    ca, keystore, chain, key = tls.ca, tls.client, tls.client_chain, tls.client_key
    java = client_properties({"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
                              "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)})
    librdkafka = client_properties({"security.protocol": "SSL", "ssl.ca.location": str(ca),
                                    "ssl.certificate.location": str(chain), "ssl.key.location": str(key)})
    assert java.librdkafka() == {
        "security.protocol": "SSL", "enable.ssl.certificate.verification": "true",
        "ssl.endpoint.identification.algorithm": "https", "ssl.ca.location": str(ca),
        "ssl.certificate.location": str(keystore), "ssl.key.location": str(keystore),
    }
    assert librdkafka.librdkafka()["ssl.key.location"] == str(key)
    for properties in (java, librdkafka):
        context = properties.client_security().tls
        assert context.cert_store_stats()["x509_ca"] == 1  # the given CA only, not the system's


def test_verification_and_the_host_name_check_can_be_turned_off():
    for name, value in (("ssl.endpoint.identification.algorithm", ""), ("ssl.endpoint.identification.algorithm", "none")):
        context = client_properties({"security.protocol": "SSL", name: value}).client_security().tls
        assert not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    properties = client_properties({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"})
    assert properties.client_security().tls.verify_mode == ssl.CERT_NONE
    assert properties.librdkafka()["enable.ssl.certificate.verification"] == "false"


def test_no_file_no_security():
    assert client_properties({}) == NO_PROPERTIES
    assert NO_PROPERTIES.librdkafka() == {"security.protocol": "PLAINTEXT"}
    assert NO_PROPERTIES.client_security().tls is None


def test_properties_survive_pickling_as_spark_ships_them():
    properties = client_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS})
    copied = pickle.loads(pickle.dumps(properties))
    assert copied == properties and copied.sasl_password.text == PASSWORD and repr(copied).count(PASSWORD) == 0


@pytest.mark.parametrize(("given", "message"), [
    ({"bootstrap.servers": "x:1", "security.protocol": "SSL", "ssl.keystore.password": PASSWORD},
     "unknown client properties: bootstrap.servers, ssl.keystore.password (known: "),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-512",
      "sasl.jaas.config": PLAIN_JAAS}, "sasl.mechanism and sasl.mechanisms name one setting and differ; give one"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/a.pem", "ssl.ca.location": "/b.pem"},
     "ssl.truststore.location and ssl.ca.location name one setting and differ; give one"),
    ({"security.protocol": "SSL", "sasl.username": "alice", "sasl.password": PASSWORD},
     "sasl.username, sasl.password set, but security.protocol=SSL uses no SASL"),
    ({"sasl.mechanism": "PLAIN"}, "sasl.mechanism set, but security.protocol=PLAINTEXT uses no SASL"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS,
      "ssl.ca.location": "/ca.pem"}, "ssl.ca.location set, but security.protocol=SASL_PLAINTEXT uses no TLS"),
    ({"security.protocol": "TLS"}, "security.protocol=TLS is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"security.protocol": "SASL_SSL", "sasl.jaas.config": SCRAM_JAAS},
     "security.protocol=SASL_SSL without sasl.mechanism: replog's clients speak PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
     "OAUTHBEARER"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
     "sasl.mechanism=GSSAPI: replog's clients speak PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": PLAIN_JAAS},
     "sasl.jaas.config names org.apache.kafka.common.security.plain.PlainLoginModule; sasl.mechanism=SCRAM-SHA-256 takes "
     "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": f"x required password={PASSWORD}"},
     "sasl.jaas.config: JAAS config entry not terminated by semi-colon"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS, "sasl.password": PASSWORD},
     "sasl.jaas.config and sasl.username/sasl.password both give the credentials; give one"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "alice"},
     "sasl.mechanism=PLAIN needs a username and a password"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "JKS", "ssl.truststore.location": "/t.jks"},
     "ssl.truststore.type=JKS: replog's clients read PEM files only (KIP-651)"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/k.pem", "ssl.certificate.location": "/c.pem"},
     "ssl.keystore.location and ssl.certificate.location/ssl.key.location both give the client's certificate; give one"),
    ({"security.protocol": "SSL", "ssl.key.location": "/k.pem"}, "ssl.key.location without ssl.certificate.location"),
    ({"security.protocol": "SSL", "ssl.key.password": PASSWORD}, "ssl.key.password set, but no key"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
     "sasl.mechanism=OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url, a file: URL of the token"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.password": PASSWORD},
     "sasl.password set, but sasl.mechanism=OAUTHBEARER presents a token"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.endpoint.url": "file:///t",
      "sasl.login.callback.handler.class": "com.example.Handler"},
     "sasl.login.callback.handler.class=com.example.Handler: replog's clients read tokens as"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM_JAAS,
      "sasl.oauthbearer.token.endpoint.url": "file:///t"},
     "sasl.oauthbearer.token.endpoint.url set, but sasl.mechanism=SCRAM-SHA-512 uses no token"),
    ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "no"},
     "enable.ssl.certificate.verification=no is not true or false"),
])
def test_unknown_or_contradictory_keys_are_one_line_naming_them_and_no_secret(given, message):
    with pytest.raises(ClientPropertiesError) as raised:
        client_properties(given)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value) and PASSWORD not in str(raised.value)


def test_a_file_is_named_in_its_errors_and_its_secrets_are_not(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text(f"security.protocol=SSL\nssl.keystore.location={tmp_path / 'missing.pem'}\nssl.key.password={PASSWORD}\n")
    properties = read_client_properties(path)
    with pytest.raises(ClientPropertiesError) as raised:
        properties.client_security()
    assert str(raised.value) == f"cannot use the client certificate and key in {tmp_path / 'missing.pem'}: No such file or directory"
    path.write_text(f"sasl.password {PASSWORD}\n")
    with pytest.raises(ClientPropertiesError, match=rf"^{path}: sasl.password set, but security.protocol=PLAINTEXT") as raised:
        read_client_properties(path)
    assert PASSWORD not in str(raised.value)
    with pytest.raises(ClientPropertiesError, match=rf"^{tmp_path / 'none'}: cannot read: No such file or directory$"):
        read_client_properties(tmp_path / "none")
