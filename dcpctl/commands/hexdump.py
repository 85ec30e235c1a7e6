"""``dcpctl hexdump``: annotate or decode packets given as binary, hex, xxd, hexdump -C or byte tables."""

from __future__ import annotations

from typing import Annotated

import typer

from dcpctl.commands._options import (
    Base64Option,
    CollectionsOption,
    DialectName,
    DialectOption,
    MaxBodyOption,
    MaxFieldBytesOption,
    ShowSecretsOption,
    StrictOption,
    dialect_of,
    env_of,
)
from dcpctl.exitcode import ExitCode
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.message import DecodeOptions
from dcpctl.render.output import MAX_FIELD_BYTES, Format, emit
from dcpctl.sources.files import open_input
from dcpctl.sources.packets import read_items


def hexdump(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="Input file, or - for standard input.", metavar="FILE")] = "-",
    fmt: Annotated[Format, typer.Option("--format", "-F", help="Output format.")] = Format.HEXDUMP,
    dialect: DialectOption = DialectName.DCP,
    collections: CollectionsOption = None,
    show_secrets: ShowSecretsOption = False,
    max_body_length: MaxBodyOption = DEFAULT_MAX_BODY_LENGTH,
    strict: StrictOption = False,
    base64: Base64Option = False,
    max_field_bytes: MaxFieldBytesOption = MAX_FIELD_BYTES,
) -> None:
    """Annotate packets field by field, in the protocol documents' style.

    Reads raw binary, plain hex (whitespace, colons and 0x prefixes ignored), xxd or hexdump -C output, or
    the byte-table diagrams of the protocol documents (each diagram is one packet).
    """
    env = env_of(ctx)
    options = DecodeOptions(dialect_of(dialect), collections, show_secrets)
    with open_input(file, env.stdin) as stream:
        stats = emit(read_items(stream, options, max_body_length), fmt, env, base64=base64,
                     max_field_bytes=max_field_bytes)
    if strict and not stats.clean:
        raise typer.Exit(ExitCode.DIAGNOSTICS)
