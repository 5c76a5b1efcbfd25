"""Kafka's `sasl.jaas.config` values, read as Kafka's JaasConfig reads them:

    <LoginModule class> required|requisite|sufficient|optional key="value" key2=value2 ... ;

Tokens as Java's StreamTokenizer makes them under JaasConfig's syntax: bytes up to the space
are blanks; `;` and `=` stand alone; `"` and `'` quote, with Java's escapes inside quotes (\\n,
\\t, \\\\, \\", octal \\ooo; any other escaped character is itself) and a line end or the end of
the text closing an unterminated quote; `/` starts a comment to the end of the line, `/* */` a
block comment; everything else is a word character. Option values that are passwords or other
secrets (`password`, PlainLoginModule's `user_<name>`, any key naming a password or secret) are
kept as tls_settings.Secret, so that a parsed configuration prints none of them.

Errors are ValueError with Kafka's messages, which never quote an option's value.
`listener_login_module` reads a broker listener's mechanism's value
(`listener.name.<l>.<mechanism>.sasl.jaas.config`), for that mechanism's server.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from replog import sasl_settings
from replog.tls_settings import Secret

from .sasl import ListenerSasl, SaslSettingsError

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")

_SEMICOLON = ";"
_EQUALS = "="
_QUOTES = "\"'"
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


class LoginModule(NamedTuple):
    name: str  # the LoginModule class, e.g. org.apache.kafka.common.security.scram.ScramLoginModule
    flag: str  # one of CONTROL_FLAGS, lower-case
    options: Mapping[str, str]  # secrets among the values are Secret


class _Token(NamedTuple):
    ordinary: str | None  # ";" or "=" (or another character a word cannot hold)
    text: str | None  # a word's or a quoted string's text


def _is_secret(key: str) -> bool:
    lowered = key.lower()
    return lowered.startswith("user_") or "password" in lowered or "secret" in lowered


def _word_char(char: str) -> bool:
    # StreamTokenizer under JaasConfig's syntax leaves 129-159 ordinary and takes anything past
    # 255 as a word character.
    return char > " " and char not in "/;=\"'" and not 129 <= ord(char) <= 159


def _skip_comment(text: str, index: int) -> int:
    """`index` is at a '/', which always starts a comment in JaasConfig's syntax: the index
    after it."""
    if text.startswith("/*", index):
        end = text.find("*/", index + 2)
        return len(text) if end < 0 else end + 2
    return min((position for position in (text.find("\n", index), text.find("\r", index)) if position >= 0),
               default=len(text))


def _quoted(text: str, index: int) -> tuple[str, int]:
    """`index` is just past the opening quote; the string's value and the index past it."""
    quote = text[index - 1]
    out = []
    while index < len(text) and text[index] not in (quote, "\n", "\r"):
        char = text[index]
        index += 1
        if char == "\\" and index < len(text):
            char = text[index]
            index += 1
            if char in "01234567":
                digits = char
                most = 3 if char <= "3" else 2
                while len(digits) < most and index < len(text) and text[index] in "01234567":
                    digits += text[index]
                    index += 1
                char = chr(int(digits, 8))
            else:
                char = _ESCAPES.get(char, char)
        out.append(char)
    if index < len(text) and text[index] == quote:
        index += 1
    return "".join(out), index


def _tokens(text: str) -> Iterator[_Token]:
    index = 0
    while index < len(text):
        char = text[index]
        if char <= " ":
            index += 1
        elif char == "/":
            index = _skip_comment(text, index)
        elif char in _QUOTES:
            value, index = _quoted(text, index + 1)
            yield _Token(None, value)
        elif not _word_char(char):
            index += 1
            yield _Token(char, None)
        else:
            start = index
            while index < len(text) and _word_char(text[index]):
                index += 1
            yield _Token(None, text[start:index])


def parse(text: str) -> tuple[LoginModule, ...]:
    """Every login module the value names, in order; ValueError if it is not JAAS config."""
    tokens = _tokens(text)
    modules = []
    for first in tokens:
        modules.append(_module(first, tokens))
    if not modules:
        raise ValueError("Login module not specified in JAAS config")
    return tuple(modules)


def login_module(text: str) -> LoginModule:
    """The one login module a `sasl.jaas.config` setting must hold, as Kafka's JaasContext
    requires of the property."""
    modules = parse(text)
    if len(modules) != 1:
        raise ValueError(f"JAAS config property contains {len(modules)} login modules, should be 1 module")
    return modules[0]


def _module(first: _Token, tokens: Iterator[_Token]) -> LoginModule:
    if not first.text:
        raise ValueError("Login module class not specified in JAAS config")
    flag_token = next(tokens, None)
    if flag_token is None:
        raise ValueError("Login module control flag not specified in JAAS config")
    if flag_token.text is None:
        raise ValueError("Login module control flag is not available in the JAAS config")
    if flag_token.text.lower() not in CONTROL_FLAGS:
        raise ValueError(f"Invalid login module control flag '{flag_token.text}' in JAAS config")
    options: dict[str, str] = {}
    for token in tokens:
        if token.ordinary == _SEMICOLON:
            return LoginModule(first.text, flag_token.text.lower(), options)
        key = token.text
        equals = next(tokens, None)
        value = next(tokens, None) if equals is not None and equals.ordinary == _EQUALS else None
        if key is None or value is None or value.text is None:
            raise ValueError(f"Value not specified for key '{key}' in JAAS config")
        options[key] = Secret(value.text) if _is_secret(key) else value.text
    raise ValueError("JAAS config entry not terminated by semi-colon")


def listener_login_module(context: ListenerSasl, mechanism: str) -> LoginModule | None:
    """A listener's `listener.name.<l>.<mechanism>.sasl.jaas.config`, parsed; None if unset."""
    name = sasl_settings.jaas_config_name(context.listener, mechanism)
    text = context.settings.get(name)
    if text is None:
        return None
    try:
        return login_module(text.text)
    except ValueError as error:
        raise SaslSettingsError(f"{name}: {error}") from None
