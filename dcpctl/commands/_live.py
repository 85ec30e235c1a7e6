"""Options the live commands share (stream, failover, rollback negotiate): who to connect to and as whom."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from dcpctl.client.connection import DEFAULT_TIMEOUT, ClientError, TlsOptions
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.render.env import Environment, OutputError

DEFAULT_PASSWORD_ENV = "DCPCTL_PASSWORD"  # noqa: S105 - the name of a variable, not a password

HostArgument = Annotated[str, typer.Argument(help="A data node: HOST or HOST:PORT (default port 11210, 11207 with "
                                             "--tls).", metavar="HOST[:PORT]")]
BucketOption = Annotated[str, typer.Option("--bucket", "-b", help="The bucket.")]
UserOption = Annotated[str, typer.Option("--user", "-u", help="The user to authenticate as.")]
PasswordEnvOption = Annotated[str, typer.Option("--password-env", help="Environment variable holding the "
                                                "password.")]
PasswordFileOption = Annotated[Path | None, typer.Option("--password-file", help="File whose first line is the "
                                                         "password.")]
MechanismOption = Annotated[str | None, typer.Option("--sasl-mech", help="SASL mechanism (default: the strongest "
                                                     "offered: SCRAM-SHA512, SCRAM-SHA256, SCRAM-SHA1, PLAIN).")]
TlsOption = Annotated[bool, typer.Option("--tls", help="Connect with TLS (default port 11207).")]
CaOption = Annotated[Path | None, typer.Option("--cacert", help="CA certificate (PEM) to trust; implies --tls.")]
CertOption = Annotated[Path | None, typer.Option("--cert", help="Client certificate (PEM); implies --tls.")]
KeyOption = Annotated[Path | None, typer.Option("--key", help="Private key of --cert.")]
NoVerifyOption = Annotated[bool, typer.Option("--no-verify", help="Do not verify the server's certificate "
                                              "(only when asked for: never by default).")]
TimeoutOption = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for a connection and "
                                              "for each answer.")]


def password_of(env: Environment, variable: str, path: Path | None, user: str) -> str:
    """The password from a file, the environment, or a prompt on a terminal; never from the command line."""
    if path is not None:
        try:
            return path.read_text().splitlines()[0] if path.read_text() else ""
        except OSError as exc:
            raise CommandError(f"--password-file: {path}: {exc.strerror}", ExitCode.INPUT) from None
    if variable in os.environ:
        return os.environ[variable]
    if env.stderr_isatty and env.stdin_isatty():
        return str(typer.prompt(f"password for {user}", hide_input=True, err=True))
    raise CommandError(f"no password: set {variable}, give --password-file, or run on a terminal to be asked",
                       ExitCode.USAGE)


def tls_of(tls: bool, cacert: Path | None, cert: Path | None, key: Path | None, no_verify: bool) -> TlsOptions | None:
    if not (tls or cacert or cert or no_verify):
        return None
    for option, path in (("--cacert", cacert), ("--cert", cert), ("--key", key)):
        if path is not None and not path.is_file():  # before connecting: a typo is not a TLS failure
            raise CommandError(f"{option}: {path}: no such file", ExitCode.INPUT)
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
