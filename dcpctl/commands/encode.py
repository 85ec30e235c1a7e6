"""``dcpctl encode``: JSON records (as ``--format json/jsonl`` prints them) back to wire bytes."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Annotated, Any

import orjson
import typer

from dcpctl.commands._options import DialectName, DialectOption, dialect_of, env_of
from dcpctl.errortext import json_error
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.encode import EncodeError, encode
from dcpctl.sources.files import open_input


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"number {text[:20]} is out of range")
    return number


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# The stdlib decoder splits a stream of objects written over several lines (jq's output); numbers it
# would read as infinity and NaN/Infinity are refused as orjson refuses them.
_DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_refuse_constant)


def _parsed(text: str, pos: int) -> tuple[Any, int]:
    """The JSON value at ``text[pos:]`` and where it ends. One whole line (JSON lines, the usual input) is
    read by orjson (nesting bounded, 1e999 and lone surrogates refused); a value over several lines by the
    stdlib decoder, whose nesting ends in a RecursionError, said here as an error."""
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    try:
        return orjson.loads(text[pos:end]), end
    except ValueError:
        pass
    try:
        return _DECODER.raw_decode(text, pos)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _records(text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    stripped = text.lstrip()
    if not stripped:
        return
    if stripped[0] == "[":
        try:
            data = orjson.loads(text)
        except ValueError as exc:
            raise CommandError(json_error("the input", exc)) from None
        if not isinstance(data, list):
            raise CommandError("input is not a JSON array of records")
        for index, item in enumerate(data, 1):
            if not isinstance(item, dict):
                raise CommandError(f"record {index} is not a JSON object")
            yield index, item
        return
    pos, index = 0, 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return
        try:
            item, pos = _parsed(text, pos)
        except ValueError as exc:
            raise CommandError(json_error(f"record {index + 1}", exc)) from None
        index += 1
        if not isinstance(item, dict):
            raise CommandError(f"record {index} is not a JSON object")
        yield index, item


def encode_command(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="JSON or JSON-lines input, or - for standard input.",
                                        metavar="FILE")] = "-",
    binary: Annotated[bool, typer.Option("--binary", help="Write raw bytes instead of hex lines.")] = False,
    fix_lengths: Annotated[bool, typer.Option(
        "--fix-lengths", help="Recompute the header's length fields from the content.")] = False,
    dialect: DialectOption = DialectName.DCP,
) -> None:
    """Encode JSON records into packets: one hex line per packet, or raw bytes with --binary.

    encode(decode(bytes)) == bytes for every packet, known or not: the record's own length fields are used
    unless --fix-lengths is given (use it after editing a record by hand).
    """
    env = env_of(ctx)
    with open_input(file, env.stdin) as stream:
        data = stream.read()
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:  # replaced, a byte would encode as another: refused, with where it is
        line = data.count(b"\n", 0, exc.start) + 1
        raise CommandError(f"the input is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                           f"(line {line})") from None
    for index, record in _records(text):
        try:
            data = encode(record, dialect_of(dialect), fix_lengths)
        except EncodeError as exc:
            raise CommandError(f"record {index}: {exc}", ExitCode.INPUT) from None
        if binary:
            env.stdout.flush()
            out = getattr(env.stdout, "buffer", None)
            if out is None:
                raise CommandError("--binary needs a byte stream for standard output", ExitCode.USAGE)
            out.write(data)
            out.flush()
        else:
            env.stdout.write(data.hex() + "\n")
