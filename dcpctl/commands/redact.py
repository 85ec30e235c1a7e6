"""``dcpctl redact``: a capture a customer can share, its keys, values and secrets replaced in place."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, BinaryIO, Final

import typer

from dcpctl.commands._options import (
    CollectionsOption,
    DialectName,
    DialectOption,
    MaxBodyOption,
    MaxConnectionsOption,
    dialect_of,
    env_of,
    option_groups,
)
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.message import DecodeOptions
from dcpctl.redact.address import AddressMap
from dcpctl.redact.core import Policy, Redactor
from dcpctl.render.env import Environment, OutputError
from dcpctl.render.progress import file_progress
from dcpctl.safetext import shown
from dcpctl.sources.capture import notice_diagnostic
from dcpctl.sources.compressed import SUFFIXES, compressed, compressing, missing_program
from dcpctl.sources.files import expand, unreadable
from dcpctl.sources.parallel import ChildError, usable_cores
from dcpctl.sources.pcap import TLS_PORTS, CaptureError, CaptureNotice, open_error
from dcpctl.sources.redaction import DEFAULT_MAX_HELD_BYTES, Summary, redact_capture, redact_captures
from dcpctl.sources.redactjobs import MAX_JOBS, redact_jobs, shareable
from dcpctl.sources.tcp import DEFAULT_MAX_CONNECTIONS

SALT_ENVIRONMENT: Final = "DCPCTL_REDACT_SALT"
SaltFileOption = Annotated[Path | None, typer.Option(
    "--salt-file", help=f"Read the redaction salt from this file (default: ${SALT_ENVIRONMENT}, else a random one, "
    "printed once on standard error). One salt gives the same placeholders in every file.", metavar="FILE")]
# A random salt's length: 128 bits, so placeholders cannot be brute-forced back to short keys.
RANDOM_SALT_BYTES: Final = 16
# The output file's write buffer: frames are small, so a mebibyte makes one write of many (a constant: the
# output is written once, front to back, and this only sets how often).
OUTPUT_BUFFER: Final = 1 << 20
# Processes by default, at most: each reads the whole file, and a capture's big connections are few
DEFAULT_JOBS: Final = 4
# A salt file larger than this is not a salt (a capture given by mistake): refused, not read whole.
MAX_SALT_FILE: Final = 4096


class ValuesMode(StrEnum):
    REDACT = "redact"
    DROP = "drop"


# The help panel of Redaction's options: in redact's help and in capture's and stream's (with --redact).
KEEP_PANEL: Final = "What redaction keeps"


@dataclass(frozen=True)
class Redaction:
    """What to keep: the options redact, capture --redact and stream --redact share (commands take them
    through _options.option_groups)."""

    keep_xattr: Annotated[list[str] | None, typer.Option(
        "--keep-xattr", help="Keep this xattr's value (repeatable); its name is always kept.", metavar="NAME",
        rich_help_panel=KEEP_PANEL)] = None
    hash_names: Annotated[bool, typer.Option(
        "--hash-names", help="Hash bucket, scope, collection, user and connection names too (in keys, manifests, "
        "cluster maps and stats), by the salt.", rich_help_panel=KEEP_PANEL)] = False
    keep_json_names: Annotated[bool, typer.Option(
        "--keep-json-names/--no-keep-json-names", help="Keep the names in JSON documents and subdocument paths; "
        "with --no-keep-json-names each is hashed by the salt, the same name to the same placeholder "
        "everywhere.", rich_help_panel=KEEP_PANEL)] = True
    values: Annotated[ValuesMode, typer.Option(
        "--values", help="redact: documents' values replaced by same-length placeholders (JSON keeps its "
        "structure); drop: emptied (xattrs too), the lengths and the TCP stream rewritten to match.",
        rich_help_panel=KEEP_PANEL)] \
        = ValuesMode.REDACT
    map_addresses: Annotated[bool, typer.Option(
        "--map-addresses", help="Map IPv4 and IPv6 addresses consistently and prefix-preserving (the same subnet "
        "maps to the same subnet), by the salt, in the frames and in messages (cluster maps, connection names, "
        "stats); clients' ports and MAC addresses too (servers' ports and vendors kept); a cluster map's host "
        "names are hashed.", rich_help_panel=KEEP_PANEL)] = False

    def redactor(self, salt: bytes, service_ports: frozenset[int]) -> Redactor:
        """The redactor; with --map-addresses its address map (``.addresses``) maps the frames' headers too,
        the servers' ports kept."""
        return Redactor(salt, Policy(frozenset(self.keep_xattr or ()), self.hash_names,
                                     self.values is ValuesMode.DROP, self.keep_json_names),
                        addresses=AddressMap(salt, service_ports) if self.map_addresses else None)

    def live(self, redact: bool, salt_file: Path | None, env: Environment, saved: str,
             service_ports: frozenset[int]) -> Redactor | None:
        """capture's and stream's --redact: the redactor (its address map included) for what ``saved`` (their file
        option) writes, None without --redact. What to keep without --redact is a mistake said, not ignored."""
        if not redact:
            given = [name for name, on in (("--keep-xattr", self.keep_xattr), ("--hash-names", self.hash_names),
                                           ("--no-keep-json-names", not self.keep_json_names),
                                           ("--values", self.values is not ValuesMode.REDACT),
                                           ("--map-addresses", self.map_addresses)) if on]
            if given:
                raise CommandError(f"{', '.join(given)}: only with --redact (what {saved} saves redacted)",
                                   ExitCode.USAGE)
            return None
        return self.redactor(salt_of(salt_file, env), service_ports)


def salt_of(salt_file: Path | None, env: Environment) -> bytes:
    """The salt: from --salt-file, else the environment, else a random one printed once on standard error."""
    given = given_salt(salt_file)
    if given is not None:
        return given
    fresh = secrets.token_hex(RANDOM_SALT_BYTES)
    env.stderr.write(f"dcpctl: redact: salt {fresh} (give it again with --salt-file or {SALT_ENVIRONMENT} to "
                     "get the same placeholders)\n")
    return fresh.encode()


def given_salt(salt_file: Path | None) -> bytes | None:
    """The salt the user gave (--salt-file, else the environment), None when there is none."""
    if salt_file is not None:
        try:
            with salt_file.open("rb") as stream:
                data = stream.read(MAX_SALT_FILE + 1)
        except OSError as exc:
            raise CommandError(f"--salt-file: {shown(str(salt_file))}: {exc.strerror or exc}", ExitCode.INPUT) from None
        if len(data) > MAX_SALT_FILE:
            raise CommandError(f"--salt-file: larger than {MAX_SALT_FILE} bytes: not a salt", ExitCode.USAGE)
        salt = data.rstrip(b"\r\n")
        if not salt:
            raise CommandError("--salt-file: the file is empty", ExitCode.USAGE)
        return salt
    text = os.environ.get(SALT_ENVIRONMENT)
    return text.encode() if text else None


def _openable(paths: list[str]) -> None:
    """Each input file opens as a capture (only its file header is read; a compressed one opens), else the
    one-line error its redaction would end with, naming every file that does not."""
    failures = [(path, why) for path in paths if (why := open_error(path)) is not None]
    if failures:
        raise unreadable(failures)


@option_groups
def redact(
    ctx: typer.Context,
    files: Annotated[list[str], typer.Argument(
        help="Capture file (pcap or pcapng; - for standard input); or several, or a glob (a ring of files is "
        "redacted as one capture).", metavar="FILE")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The redacted capture (classic pcap), written "
                                         "whole or not at all; - for standard output. A directory (of several "
                                         "files: made if need be): each file's copy under its name.", metavar="OUT")],
    redaction: Redaction = Redaction(),
    port: Annotated[list[int] | None, typer.Option("--port", "-p", help="Server port to decode "
                                                   "(repeatable; default 11210).", metavar="PORT", min=1,
                                                   max=65535)] = None,
    salt_file: SaltFileOption = None,
    keep_unparsed: Annotated[bool, typer.Option(
        "--keep-unparsed", help="Keep what cannot be parsed at all instead of dropping it, as it is: frames on "
        "other ports and not TCP, TLS connections.")] = False,
    max_held_bytes: Annotated[int, typer.Option(
        "--max-held-bytes", min=0, metavar="BYTES",
        help=f"Frames held waiting for the messages they carry to end; past it the oldest is written with its "
             f"unfinished bytes zeroed (default {DEFAULT_MAX_HELD_BYTES}: two of the largest packets and a mebibyte).")]
        = DEFAULT_MAX_HELD_BYTES,
    dialect: DialectOption = DialectName.DCP,
    collections: CollectionsOption = None,
    max_body_length: MaxBodyOption = DEFAULT_MAX_BODY_LENGTH,
    max_connections: MaxConnectionsOption = DEFAULT_MAX_CONNECTIONS,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", min=1, max=MAX_JOBS, metavar="N",
        help=f"Processes sharing the capture's connections, each reading every file (default: one per core, "
             f"at most {DEFAULT_JOBS}; 1 redacts in this process alone). Standard input, compressed files, "
             "--hash-names and --map-addresses are redacted by one process.")] = None,
) -> None:
    """Replace document keys, values, xattr values and secrets in a capture by same-length placeholders.

    Every protocol fact stays: opcodes, vbuckets, seqnos, uuids, CAS, snapshots, failover logs, flags,
    datatypes, statuses, timing and TCP behaviour. A summary goes to standard error.
    """
    env = env_of(ctx)
    paths = expand(files, env.warn)
    # an existing directory takes a copy under its input's name, as cp copies, however many files the globs found
    into = len(paths) > 1 or (str(output) != "-" and output.is_dir())
    several = _several(paths, output) if into else None  # usage errors before the salt is printed
    if several is None and _is_input(output, paths[0]):
        raise CommandError(f"-o {shown(str(output))}: is the input: its copy would replace the capture it is made "
                           "from; name another file", ExitCode.USAGE)
    packer = SUFFIXES.get(output.suffix.lower()) if several is None else None
    missing = missing_program(packer) if packer is not None else None
    if missing is not None:
        raise CommandError(f"-o {shown(str(output))}: {missing}", ExitCode.USAGE)
    _openable(paths)  # and a mistaken input: a salt printed for a run that writes nothing is noise
    salt = salt_of(salt_file, env)
    ports = frozenset(port or [11210])
    redactor = redaction.redactor(salt, ports | TLS_PORTS)
    options = DecodeOptions(dialect_of(dialect), collections)

    # a big file, someone watching standard error
    progress = file_progress(env, paths, "redacting", sized=not any(map(compressed, paths)))
    current = [paths[0]]  # the file being read, for its error
    workers = jobs or min(usable_cores(), DEFAULT_JOBS)

    def on_file(path: str) -> None:
        current[0] = path
        if progress is not None:
            progress.start_file(path)

    def run_jobs(outputs: Callable[[str], AbstractContextManager[BinaryIO]]) -> tuple[Summary, list[CaptureNotice]]:
        """The files' connections shared among the workers (raises as the serial paths do)."""
        return redact_jobs(paths, outputs, redactor, options, ports, TLS_PORTS, jobs=workers,
                           keep_unparsed=keep_unparsed, max_body_length=max_body_length,
                           max_connections=max_connections, max_held_bytes=max_held_bytes, on_file=on_file,
                           on_progress=progress.advance if progress is not None else None)

    if several is not None:
        def opening(path: str) -> Callable[[float, bytes, int], None] | None:
            current[0] = path
            return progress.tap(path) if progress is not None else None

        def run_all(outputs: Callable[[str], AbstractContextManager[BinaryIO]]
                    ) -> tuple[Summary, list[CaptureNotice]]:
            try:
                with progress if progress is not None else contextlib.nullcontext():
                    if workers > 1 and shareable(redactor, paths):
                        return run_jobs(outputs)
                    return redact_captures(paths, outputs, redactor, options, ports, TLS_PORTS,
                                           keep_unparsed=keep_unparsed, max_body_length=max_body_length,
                                           max_connections=max_connections, max_held_bytes=max_held_bytes,
                                           progress=opening)
            except (CaptureError, FileNotFoundError) as exc:
                raise CommandError(f"{shown(current[0])}: {exc}", ExitCode.INPUT) from None
            except ChildError as exc:
                raise CommandError(str(exc), ExitCode.FAILURE) from None

        try:
            summary, notices = _atomically_each(several, run_all)
        except OSError as exc:
            raise CommandError(f"{shown(str(exc.filename or output))}: {exc.strerror or exc}", ExitCode.INPUT) \
                from None
        _report(env, summary, notices)
        return
    file = paths[0]

    def run(out: BinaryIO) -> tuple[Summary, list[CaptureNotice]]:
        try:
            with progress if progress is not None else contextlib.nullcontext():
                if workers > 1 and shareable(redactor, paths):
                    return run_jobs(lambda _path: contextlib.nullcontext(out))
                return redact_capture(file, out, redactor, options, ports, TLS_PORTS, keep_unparsed=keep_unparsed,
                                      max_body_length=max_body_length, max_connections=max_connections,
                                      max_held_bytes=max_held_bytes,
                                      progress=progress.tap(file) if progress is not None else None)
        except (CaptureError, FileNotFoundError) as exc:
            raise CommandError(f"{shown(file)}: {exc}", ExitCode.INPUT) from None
        except ChildError as exc:
            raise CommandError(str(exc), ExitCode.FAILURE) from None

    binary: BinaryIO | None = getattr(env.stdout, "buffer", None)
    if str(output) == "-" and (env.stdout_isatty or binary is None):
        raise CommandError("-o -: standard output is a terminal: redirect it, or name a file", ExitCode.USAGE)
    try:
        if binary is not None and str(output) == "-":  # a pipe: the next program reads the capture as it goes
            summary, notices = run(binary)
            binary.flush()
        elif output.exists() and not output.is_file():  # a device or a pipe: written in place, never replaced
            with output.open("wb") as out:
                summary, notices = run(out)
        else:
            summary, notices = _atomically(output, run)
    except BrokenPipeError:
        raise  # -o - and the reader went away (| head): the root stops quietly
    except OSError as exc:
        if str(output) == "-":
            raise OutputError(exc.errno, exc.strerror or str(exc)) from None
        raise CommandError(f"{shown(str(output))}: {exc.strerror or exc}", ExitCode.INPUT) from None
    _report(env, summary, notices)


def _report(env: Environment, summary: Summary, notices: list[CaptureNotice]) -> None:
    for notice in notices:
        env.stderr.write(f"dcpctl: redact: {shown(notice_diagnostic(notice).message)}\n")
    env.stderr.write(summary_text(summary))


@contextlib.contextmanager
def _temporary(output: Path, temporaries: list[str]) -> Iterator[BinaryIO]:
    """A temporary file beside ``output`` (its name added to ``temporaries``, for the caller to rename or
    remove); a name ending in .gz, .bz2, .xz, .zst or .lz4 is written compressed so, by a child process on
    the other core."""
    handle, temporary = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
    temporaries.append(temporary)
    name = SUFFIXES.get(output.suffix.lower())
    with os.fdopen(handle, "wb", buffering=OUTPUT_BUFFER) as out:
        if name is None:
            yield out
        else:
            with compressing(out, name) as data:
                yield data


def _atomically(output: Path, run: Callable[[BinaryIO], tuple[Summary, list[CaptureNotice]]]
                ) -> tuple[Summary, list[CaptureNotice]]:
    """A regular file written whole or not at all: a temporary file beside it, renamed over it at the end."""
    temporaries: list[str] = []
    try:
        with _temporary(output, temporaries) as out:
            done = run(out)
        os.replace(temporaries[0], output)
    finally:
        for temporary in temporaries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
    return done


def _several(paths: list[str], output: Path) -> dict[str, Path]:
    """Where each of several files' copies goes: under its name in the directory ``output`` (made if it does
    not exist), never over an input, never two to one name."""
    if "-" in paths:
        raise CommandError("-: standard input is one capture, not one of several files", ExitCode.USAGE)
    if str(output) == "-" or (output.exists() and not output.is_dir()):
        raise CommandError(f"-o {shown(str(output))}: with several files, give a directory (each file's copy is "
                           "written there under its name)", ExitCode.USAGE)
    targets: dict[str, Path] = {}
    for path in paths:
        target = output / Path(path).name
        if target in targets.values():
            raise CommandError(f"{shown(path)}: two files of this name: their copies would have one name in "
                               f"{shown(str(output))}", ExitCode.USAGE)
        if _is_input(target, path):
            raise CommandError(f"-o {shown(str(output))}: holds the input {shown(path)}; give another directory",
                               ExitCode.USAGE)
        targets[path] = target
    return targets


def _is_input(target: Path, path: str) -> bool:
    """Whether writing ``target`` would replace the input file ``path`` (the same file by any name: a link,
    another spelling of its path)."""
    try:
        return path != "-" and os.path.samefile(target, path)
    except OSError:  # either missing: not the same file
        return False


def _atomically_each(targets: dict[str, Path],
                     run: Callable[[Callable[[str], AbstractContextManager[BinaryIO]]],
                                   tuple[Summary, list[CaptureNotice]]]) -> tuple[Summary, list[CaptureNotice]]:
    """Several files written whole or not at all: each to a temporary file beside its name, all renamed at the
    end (``run`` gets the outputs, by input path)."""
    next(iter(targets.values())).parent.mkdir(parents=True, exist_ok=True)
    temporaries: list[str] = []
    try:
        done = run(lambda path: _temporary(targets[path], temporaries))
        for temporary, target in zip(temporaries, targets.values(), strict=True):
            os.replace(temporary, target)
    finally:
        for temporary in temporaries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
    return done


def replaced_lines(counts: Counter[str]) -> list[str]:
    """The summary's lines of what was replaced (a redactor's counts)."""
    lines = [f"  keys {counts['keys']}, values {counts['values']}, xattr values {counts['xattrs']}, "
             f"SASL values {counts['sasl_values']}, user agents {counts['user_agents']}, names {counts['names']}, "
             f"addresses {counts['addresses']}"]
    if counts["json_names"]:
        lines.append(f"  JSON names hashed (--no-keep-json-names): {counts['json_names']}")
    if counts["ports"]:
        lines.append(f"  client ports mapped (--map-addresses): {counts['ports']}")
    if counts["macs"]:
        lines.append(f"  MAC addresses mapped (--map-addresses): {counts['macs']}")
    if counts["host_names"]:
        lines.append(f"  cluster map host names hashed (--map-addresses): {counts['host_names']}")
    return lines


def summary_text(summary: Summary) -> str:
    """The summary on standard error: what was replaced, what was left out and why."""
    counts = summary.counts
    lines = [f"redacted: {summary.frames_out} of {summary.frames_in} frames written, {summary.messages} messages",
             *replaced_lines(counts)]
    if counts["snappy_resized"]:
        lines.append(f"  snappy values compressed again at a new length: {counts['snappy_resized']}")
    if counts["unparsed_bytes"]:
        lines.append(f"  {counts['unparsed_bytes']} bytes of {counts['unparsed_connections']} connections "
                     "overwritten: not parsed (a start the capture missed, a gap, garbage)")
    if counts["truncated"]:
        lines.append(f"  messages cut short by the capture, their keys and values zeroed: {counts['truncated']}")
    if counts["untrusted"]:
        lines.append(f"  messages found just after skipped bytes (maybe a document's bytes), only their header "
                     f"and extras kept: {counts['untrusted']}")
    if counts["held_too_long"]:
        lines.append(f"  frames written before their messages ended (--max-held-bytes), unfinished bytes zeroed: "
                     f"{counts['held_too_long']}")
    for reason, number in sorted(summary.dropped_connections.items()):
        lines.append(f"  connections dropped: {number} ({reason})")
    for reason, number in sorted(summary.dropped.items()):
        lines.append(f"  frames dropped: {number} ({reason})")
    return "".join(f"dcpctl: {line}\n" for line in lines)
