"""`replog users create|delete|list`: users' SCRAM credentials, as `kafka-configs --entity-type
users --alter --add-config 'SCRAM-SHA-512=[password=...]'` manages them, through the store or a
broker (admin_client.py).

A password is read from a file or from stdin, never from the command line (where `ps` and the
shell's history show it), and goes nowhere but into its salted form: not echoed, not in an
error, not in a log line.
"""

from __future__ import annotations

import sys

import click

from replog.security.scram import ITERATIONS_DEFAULT, ITERATIONS_MAX, ITERATIONS_MIN, MECHANISMS

from .common import AdminCommand, admin_options, print_outcome, through_admin

MECHANISM_NAMES = [mechanism.name for mechanism in MECHANISMS]
MECHANISM_DEFAULT = "SCRAM-SHA-512"


@click.group()
def users() -> None:
    """Create, delete and list users' SCRAM credentials (SCRAM-SHA-256, SCRAM-SHA-512), kept
    salted in the coordination store under /config/users/<user> as Kafka keeps them.

    Every subcommand takes --coord URL or --bootstrap-server HOST:PORT, as `replog topics` does.
    """


def _without_newline(text: str) -> str:
    """A password as a file or a pipe holds it: one line, its end not part of it."""
    return text.removesuffix("\n").removesuffix("\r")


def _password(password_file: str | None, password_stdin: bool) -> str:
    if (password_file is None) == (not password_stdin):
        raise click.UsageError("give the password with exactly one of --password-file FILE and --password-stdin")
    if password_stdin:
        raw = sys.stdin.buffer.read()
    else:
        with open(password_file, "rb") as opened:
            raw = opened.read()
    try:
        password = _without_newline(raw.decode("utf-8"))
    except UnicodeDecodeError:  # its message would quote a byte of the password
        raise click.UsageError("the password is not UTF-8 text") from None
    if not password:
        raise click.UsageError("the password is empty")
    return password


@users.command("create", cls=AdminCommand)
@click.argument("user")
@click.option("--mechanism", type=click.Choice(MECHANISM_NAMES), default=MECHANISM_DEFAULT, show_default=True,
              help="the SASL mechanism the credential is for")
@click.option("--iterations", type=int, default=ITERATIONS_DEFAULT, show_default=True,
              help=f"PBKDF2 iterations, {ITERATIONS_MIN} to {ITERATIONS_MAX} (Kafka's bounds)")
@click.option("--password-file", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="read the password from FILE (its first line's end is not part of it)")
@click.option("--password-stdin", is_flag=True, help="read the password from stdin")
@admin_options
def users_create(user: str, mechanism: str, iterations: int, password_file: str | None, password_stdin: bool,
                 coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Set USER's credential for the mechanism, replacing one it had; a user may hold one of
    each mechanism.

    \b
    Example:
      replog users create alice --mechanism SCRAM-SHA-512 --password-file alice.pw \\
          --bootstrap-server 127.0.0.1:9092
    """
    password = _password(password_file, password_stdin)
    through_admin(coord_url, bootstrap, lambda admin: admin.create_user(user, mechanism, iterations, password))
    print_outcome(output, {"user": user, "mechanism": mechanism, "iterations": iterations},
                  f"Set user {user}'s {mechanism} credential ({iterations} iterations).")


@users.command("delete", cls=AdminCommand)
@click.argument("user")
@click.option("--mechanism", "mechanisms", type=click.Choice(MECHANISM_NAMES), multiple=True,
              help="delete only this mechanism's credential; repeatable [default: every one]")
@admin_options
def users_delete(user: str, mechanisms: tuple[str, ...], coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Delete USER's credentials; with none left, the user cannot authenticate.

    \b
    Example:
      replog users delete alice --coord zk://127.0.0.1:2181/replog
    """
    deleted = through_admin(coord_url, bootstrap, lambda admin: admin.delete_user(user, mechanisms))
    print_outcome(output, {"user": user, "deleted": deleted},
                  f"Deleted user {user}'s {' and '.join(deleted)} credential{'s' if len(deleted) > 1 else ''}.")


@users.command("list", cls=AdminCommand)
@click.argument("names", metavar="[USER]...", nargs=-1)
@admin_options
def users_list(names: tuple[str, ...], coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """List the users that have a credential, or the named ones, with each credential's
    mechanism and iterations (never a salt or a key). JSON: {"users": [{"user", "credentials":
    [{"mechanism", "iterations"}]}]}.

    \b
    Example:
      replog users list --bootstrap-server 127.0.0.1:9092 --output json
    """
    from .render import print_json, print_users

    described = through_admin(coord_url, bootstrap, lambda admin: admin.describe_users(names))
    if output == "json":
        print_json({"users": [{"user": entry.user, "credentials": [
            {"mechanism": mechanism, "iterations": iterations} for mechanism, iterations in entry.credentials]}
            for entry in described]})
    else:
        print_users(described)
