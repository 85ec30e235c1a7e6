"""Options the live commands share (stream, failover, rollback negotiate): who to connect to and as whom."""

from __future__ import annotations

import getpass
import os
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

import typer

from dcpctl.client.connection import DEFAULT_TIMEOUT, AddressError, ClientError, Connection, TlsOptions, split_host
from dcpctl.client.streamer import noop_interval_of, vbucket_map
from dcpctl.dcp.sasl import MAX_SCRAM_ITERATIONS, MECHANISMS, PLAIN, canonical
from dcpctl.errortext import file_error, ssl_reason
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.render.env import Environment, OutputError

DEFAULT_PASSWORD_ENV = "DCPCTL_PASSWORD"  # noqa: S105 - the name of a variable, not a password
MAX_SEQNO: Final = 2**64 - 1  # seqnos are unsigned 64-bit on the wire
# a day: a socket takes no timeout past the platform's time_t (--timeout 1e10 was a traceback)
MAX_TIMEOUT: Final = 86_400


def _checked_host(value: str) -> str:
    """HOST[:PORT] is checked before connecting: a bad port is a usage error, not a failed connection."""
    try:
        split_host(value, 0)
    except AddressError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def _checked_mechanism(value: str | None) -> str | None:
    if value is not None and canonical(value) not in (*MECHANISMS, PLAIN):
        raise typer.BadParameter(f"{value!r}: dcpctl authenticates with {', '.join((*MECHANISMS, PLAIN))}")
    return value


def seqno_or(value: str, option: str, words: tuple[str, ...]) -> str:
    """``--from``/``--until``: one of ``words`` or a seqno (ASCII digits, at most 2^64 - 1); a usage error
    otherwise."""
    if value in words or (value.isascii() and value.isdigit() and int(value) <= MAX_SEQNO):
        return value
    raise CommandError(f"{option}: {', '.join(words)} or a seqno from 0 to {MAX_SEQNO}, not {value!r}",
                       ExitCode.USAGE)


# connection_buffer_size: kv_engine reads it as 32 bits, and DCP_BUFFER_ACKNOWLEDGEMENT's bytes_to_ack is 32 bits
MAX_BUFFER_SIZE: Final = 2**32 - 1


def window_of(value: str, option: str) -> int:
    """A flow-control window in bytes (``--control connection_buffer_size``): a usage error unless 0 to
    MAX_BUFFER_SIZE in ASCII digits."""
    if value.isascii() and value.isdigit() and int(value) <= MAX_BUFFER_SIZE:
        return int(value)
    raise CommandError(f"{option}: a number of bytes from 0 to {MAX_BUFFER_SIZE}, not {value!r}", ExitCode.USAGE)


def noop_interval_of_option(value: str, option: str) -> float:
    """A noop interval in seconds (``--control set_noop_interval``): a usage error unless a number above 0."""
    seconds = noop_interval_of(value)
    if seconds is None:
        raise CommandError(f"{option}: a number of seconds above 0, not {value!r}", ExitCode.USAGE)
    return seconds


HostArgument = Annotated[str, typer.Argument(help="A data node: HOST, HOST:PORT or [IPv6]:PORT (default port "
                                             "11210, 11207 with --tls).", metavar="HOST[:PORT]",
                                             callback=_checked_host)]
# The options every live command takes, declared once (commands take them through _options.option_groups).
CONNECTION_PANEL: Final = "Connection"


@dataclass(frozen=True)
class Login:
    """Who to connect to and as whom: the options stream, failover and rollback negotiate share."""

    bucket: Annotated[str, typer.Option("--bucket", "-b", help="The bucket.", metavar="BUCKET",
                                        rich_help_panel=CONNECTION_PANEL)] = "default"
    user: Annotated[str, typer.Option("--user", "-u", help="The user to authenticate as.", metavar="USER",
                                      rich_help_panel=CONNECTION_PANEL)] = "Administrator"
    password_env: Annotated[str, typer.Option("--password-env", help="Environment variable holding the password.",
                                              metavar="VAR", rich_help_panel=CONNECTION_PANEL)] = DEFAULT_PASSWORD_ENV
    password_file: Annotated[Path | None, typer.Option("--password-file", help="File whose first line is the "
                                                       "password.", metavar="FILE",
                                                       rich_help_panel=CONNECTION_PANEL)] = None
    sasl_mech: Annotated[str | None, typer.Option("--sasl-mech", help="SASL mechanism (default: the strongest "
                                                  "offered: SCRAM-SHA512, SCRAM-SHA256, SCRAM-SHA1, PLAIN).",
                                                  callback=_checked_mechanism, metavar="MECH",
                                                  rich_help_panel=CONNECTION_PANEL)] = None
    tls: Annotated[bool, typer.Option("--tls", help="Connect with TLS (default port 11207).",
                                      rich_help_panel=CONNECTION_PANEL)] = False
    cacert: Annotated[Path | None, typer.Option("--cacert", help="CA certificate (PEM) to trust; implies --tls.",
                                                metavar="PEM", rich_help_panel=CONNECTION_PANEL)] = None
    cert: Annotated[Path | None, typer.Option("--cert", help="Client certificate (PEM); implies --tls.",
                                              metavar="PEM", rich_help_panel=CONNECTION_PANEL)] = None
    key: Annotated[Path | None, typer.Option("--key", help="Private key of --cert.", metavar="PEM",
                                             rich_help_panel=CONNECTION_PANEL)] = None
    no_verify: Annotated[bool, typer.Option("--no-verify", help="Do not verify the server's certificate (only "
                                            "when asked for: never by default).",
                                            rich_help_panel=CONNECTION_PANEL)] = False
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, max=MAX_TIMEOUT, help="Seconds to wait for a "
                                           f"connection and for each answer (at most {MAX_TIMEOUT}).",
                                           metavar="SECONDS",
                                           rich_help_panel=CONNECTION_PANEL)] = DEFAULT_TIMEOUT
    max_scram_iterations: Annotated[int, typer.Option(
        "--max-scram-iterations", min=1, metavar="N", rich_help_panel=CONNECTION_PANEL,
        help=f"Refuse a server that asks for more SCRAM iterations (default {MAX_SCRAM_ITERATIONS}; Couchbase asks "
             "15000): a hostile server could otherwise hold the client in PBKDF2 for minutes.")] = MAX_SCRAM_ITERATIONS

    def password(self, env: Environment) -> str:
        return password_of(env, self.password_env, self.password_file, self.user)

    def tls_options(self) -> TlsOptions | None:
        return tls_of(self.tls, self.cacert, self.cert, self.key, self.no_verify)

    def seed(self, host: str, tls_options: TlsOptions | None) -> tuple[str, int]:
        """The node the command was given, its port defaulted by --tls."""
        return split_host(host, 11207 if tls_options else 11210)

    def connect(self, host: str, port: int, password: str, tls_options: TlsOptions | None) -> Connection:
        """A connection to one node, logged in and on the bucket (closed again if that fails)."""
        conn = Connection(host, port, tls=tls_options, timeout=self.timeout,
                          max_scram_iterations=self.max_scram_iterations)
        try:
            conn.bootstrap(self.user, password, self.bucket, self.sasl_mech)
        except BaseException:
            conn.close()
            raise
        return conn

    def cluster_map(self, host: str, password: str, tls_options: TlsOptions | None
                    ) -> tuple[int, dict[int, tuple[str, int]]]:
        """The number of vbuckets and each one's active node, read from the node the command was given."""
        seed_host, seed_port = self.seed(host, tls_options)
        seed = self.connect(seed_host, seed_port, password, tls_options)
        try:
            return vbucket_map(seed, seed_host, seed_port, tls=tls_options is not None)
        finally:
            seed.close()


def password_of(env: Environment, variable: str, path: Path | None, user: str) -> str:
    """The password from a file, the environment, or a prompt on a terminal; never from the command line."""
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(file_error(f"--password-file: {path}", exc), ExitCode.INPUT) from None
        except UnicodeDecodeError:  # SASL sends the password as UTF-8: other bytes cannot be it
            raise CommandError(f"--password-file: {path}: not UTF-8 text", ExitCode.INPUT) from None
        return text.splitlines()[0] if text else ""
    if variable in os.environ:
        return os.environ[variable]
    if env.stderr_isatty and env.stdin_isatty():
        try:  # getpass, not click's prompt: that makes Ctrl-D an Abort, said as 'interrupted'
            return getpass.getpass(f"password for {user}: ")
        except EOFError:
            env.stderr.write("\n")  # the prompt's line ended, as Enter would
            raise CommandError("no password: the prompt was given the end of input (Ctrl-D)", ExitCode.USAGE) \
                from None
    raise CommandError(f"no password: set {variable}, give --password-file, or run on a terminal to be asked",
                       ExitCode.USAGE)


def tls_of(tls: bool, cacert: Path | None, cert: Path | None, key: Path | None, no_verify: bool) -> TlsOptions | None:
    if not (tls or cacert or cert or no_verify):
        return None
    for option, path in (("--cacert", cacert), ("--cert", cert), ("--key", key)):
        if path is not None and not path.is_file():  # before connecting: a typo is not a TLS failure
            raise CommandError(f"{option}: {path}: no such file", ExitCode.INPUT)
    if cacert is not None:  # loaded here too: a file that is no certificate is not a TLS failure either
        try:
            ssl.create_default_context(cafile=str(cacert))
        except (OSError, ssl.SSLError) as exc:
            raise CommandError(f"--cacert {cacert}: not a PEM CA certificate{ssl_reason(exc)}",
                               ExitCode.INPUT) from None
    if cert is not None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            named = f"--cert {cert}, --key {key}" if key is not None else \
                f"--cert {cert} (without --key, the key must be in it)"
            raise CommandError(f"{named}: not a PEM certificate and its key{ssl_reason(exc)}",
                               ExitCode.INPUT) from None
    return TlsOptions(str(cacert) if cacert else None, str(cert) if cert else None, str(key) if key else None,
                      verify=not no_verify)


@contextmanager
def client_errors() -> Iterator[None]:
    """A connector failure becomes the one-line error and exit code it names."""
    try:
        yield
    except ClientError as exc:
        raise CommandError(str(exc), exc.code) from None
    except (BrokenPipeError, OutputError):
        raise  # standard output, not the connection: the root says so once (or, for | head, stays quiet)
    except OSError as exc:
        raise CommandError(f"{exc.strerror or exc}", ExitCode.CONNECTION) from None


__all__ = ["DEFAULT_TIMEOUT"]
