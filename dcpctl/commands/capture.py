"""``dcpctl capture``: sniff DCP traffic live, decoded by the same code and printer as ``decode``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from dcpctl.commands._options import (
    Base64Option,
    CollectionsOption,
    DialectName,
    DialectOption,
    LocalTimeOption,
    MaxBodyOption,
    MaxConnectionsOption,
    Rotation,
    ShowSecretsOption,
    TemplateOption,
    dialect_of,
    env_of,
    first_signal_stops,
    line_template_of,
    live_capture_path,
    option_groups,
)
from dcpctl.commands.redact import Redaction, SaltFileOption, given_salt, salt_of, summary_text
from dcpctl.dcp.observed import Observed
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.diagnostic import Diagnostic, diagnostic
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.message import DecodeOptions
from dcpctl.render.lines import PlainLines
from dcpctl.render.output import Format, as_written, emit
from dcpctl.render.record import record as record_of
from dcpctl.sources.capture import Item, decode_segments
from dcpctl.sources.pcap import (
    TLS_PORTS,
    CaptureError,
    CaptureNotice,
    TcpSegment,
    bpf_error,
    live_segments,
    open_live,
)
from dcpctl.sources.redaction import CaptureRedactor
from dcpctl.sources.savefiles import Savefiles
from dcpctl.sources.tcp import DEFAULT_MAX_CONNECTIONS


def _privilege_hint(reason: str) -> str:
    """What to do when pcap was refused: only for a refusal (a missing interface needs no root), and said
    for who runs it (root in a container can lack the capabilities)."""
    if not any(word in reason.lower() for word in ("permitted", "permission", "privilege")):
        return ""
    if os.geteuid() == 0:
        return " (running as root, but without CAP_NET_RAW and CAP_NET_ADMIN: a container may drop them)"
    return " (capturing needs root, or CAP_NET_RAW and CAP_NET_ADMIN: sudo, or setcap on the Python binary)"


@option_groups
def capture(
    ctx: typer.Context,
    interface: Annotated[str, typer.Option("--interface", "-i", help="Interface to capture on (any, lo, eth0).",
                                           metavar="IFACE")],
    write: Annotated[Path | None, typer.Option("--write", "-w", help="Also save the raw frames to this pcap.",
                                               metavar="FILE")]
    = None,
    rotation: Rotation = Rotation(),
    bpf: Annotated[str | None, typer.Option("--bpf", help="Capture filter (default: tcp port 11210 or 11207).",
                                            metavar="FILTER")]
    = None,
    port: Annotated[list[int] | None, typer.Option("--port", "-p", help="Server port to decode (repeatable).",
                                                   metavar="PORT", min=1, max=65535)]
    = None,
    fmt: Annotated[Format | None, typer.Option("--format", "-F", help="Output format (default: pretty on a "
                                               "terminal, jsonl when piped).")] = None,
    template: TemplateOption = None,
    count: Annotated[int | None, typer.Option("--count", "-c", min=1, help="Stop after N messages.",
                                              metavar="N")] = None,
    dialect: DialectOption = DialectName.DCP,
    collections: CollectionsOption = None,
    show_secrets: ShowSecretsOption = False,
    max_body_length: MaxBodyOption = DEFAULT_MAX_BODY_LENGTH,
    max_connections: MaxConnectionsOption = DEFAULT_MAX_CONNECTIONS,
    base64: Base64Option = False,
    local_time: LocalTimeOption = False,
    redact: Annotated[bool, typer.Option("--redact", help="-w saves the frames redacted as dcpctl redact "
                                         "writes them (what cannot be redacted left out).")] = False,
    salt_file: SaltFileOption = None,
    redaction: Redaction = Redaction(),
) -> None:
    """Capture live traffic and decode it as it arrives; Ctrl-C stops (and closes the --write file)."""
    env = env_of(ctx)
    ports = frozenset(port or [11210])
    if redact and write is None:
        raise CommandError("--redact redacts what -w saves: give -w FILE", ExitCode.USAGE)
    line_template = line_template_of(template, fmt)
    file_size = rotation.size(write)
    live_capture_path(write, "-w")
    if not redact:  # what to keep without --redact is said at once
        redaction.live(redact, salt_file, env, "-w", frozenset())
    salt = given_salt(salt_file) if redact else None  # a bad --salt-file is said before anything opens
    if bpf is not None and (why := bpf_error(bpf)) is not None:
        raise CommandError(f"--bpf: {why}", ExitCode.USAGE)
    try:
        linktype, reader = open_live(interface, bpf, ports)
    except CaptureError as exc:
        raise CommandError(f"{exc}{_privilege_hint(str(exc))}", ExitCode.INPUT) from None
    options = DecodeOptions(dialect_of(dialect), collections, show_secrets)
    stopping: list[bool] = []  # the first Ctrl-C, or the -w file failing: end after the packet in hand
    with contextlib.ExitStack() as stack:
        writer: Savefiles | None = None
        if write is not None:
            try:
                writer = stack.enter_context(Savefiles(write, linktype, file_size, rotation.file_count,
                                                       seconds=rotation.rotate_seconds))
            except OSError as exc:
                raise CommandError(f"{write!s}: {exc.strerror}", ExitCode.INPUT) from None
        engine = None
        # a random salt is printed once: not for a run that a bad filter, an interface or a -w file stops first
        redacting = redaction.redactor(salt if salt is not None else salt_of(None, env), ports | TLS_PORTS) \
            if redact else None
        if redacting is not None and writer is not None:
            engine = CaptureRedactor(redacting, writer, linktype, DecodeOptions(dialect_of(dialect), collections),
                                     ports, TLS_PORTS, max_body_length=max_body_length,
                                     max_connections=max_connections)

        # as tcpdump does: once the capture runs, say so (standard error; scripts can wait for this line)
        env.error_console().print(f"dcpctl: capturing on {interface}, decoding port(s) "
                                  f"{', '.join(map(str, sorted(ports)))}; Ctrl-C stops", markup=False)
        output = env.output_format(fmt, Format.PRETTY, Format.JSONL)
        # every message printed as its JSON line: plain items as lines from templates, as decode does
        lines = output is Format.JSONL and count is None and not base64 and line_template is None

        def save(ts: float, data: bytes, wire: int) -> None:
            assert writer is not None
            if writer.error is None:
                try:
                    writer.write(ts, data, wire)
                except OSError:
                    stopping.append(True)  # what was read is still decoded and printed

        def redacted(segments: Iterator[TcpSegment | CaptureNotice]) -> Iterator[TcpSegment | CaptureNotice]:
            """-w --redact: each segment also goes through the redactor, which writes the frames."""
            assert engine is not None
            for item in segments:
                if isinstance(item, TcpSegment) and writer is not None and writer.error is None:
                    try:
                        engine.segment(item)
                    except OSError:
                        stopping.append(True)
                yield item

        def tap(ts: float, data: bytes, wire: int) -> None:
            assert engine is not None
            try:
                engine.tap(ts, data, wire)
            except OSError:
                stopping.append(True)

        def items() -> Iterator[Item | bytes]:
            printed = 0
            segments = live_segments(reader, ports, TLS_PORTS,
                                     None if writer is None else save if engine is None else tap,
                                     stop=lambda: bool(stopping))
            if engine is not None:
                segments = redacted(segments)
            for item in decode_segments(segments, options, ports, max_body_length, max_connections,
                                        PlainLines() if lines else None):
                yield item
                if isinstance(item, Observed) and (line_template is None or line_template.fits(
                        as_written(record_of(item), base64))):
                    printed += 1
                    if count is not None and printed >= count:
                        break
            yield from _drops(reader)

        # Ctrl-C (or SIGTERM from a timeout or a service manager, SIGHUP from a closed terminal) is how a live
        # capture normally ends: the first one stops reading, and what was read is decoded and written whole; a
        # second one (output blocked, say) stops at once
        with contextlib.suppress(KeyboardInterrupt), first_signal_stops(lambda _sig: stopping.append(True)):
            emit(items(), output, env, base64=base64, live=True, local_time=local_time, template=line_template)
        if engine is not None and writer is not None:
            # however the capture ended (its traffic, Ctrl-C, --count): the frames still held go out
            if writer.error is None:
                with contextlib.suppress(OSError):  # the error is the file's, reported below
                    engine.finish()
            env.stderr.write(summary_text(engine.summary))
        if writer is not None and writer.error is not None:
            failed = writer.error.filename or writer.name  # opening the next file (-C), or writing this one
            held = "the file" if str(failed) == str(writer.name) else str(writer.name)
            raise CommandError(f"{failed}: {writer.error.strerror or writer.error}: the capture stopped; "
                               f"{held} holds the {writer.records} frames saved before, whole", ExitCode.INPUT)


def _drops(reader: Any) -> Iterator[Diagnostic]:
    """libpcap's count of packets the kernel dropped (its buffer was full), as a diagnostic if any."""
    try:
        _received, dropped, interface_dropped = reader.stats()
    except Exception:  # noqa: BLE001 - no statistics on this platform or interface: nothing to say
        return
    if dropped or interface_dropped:
        yield diagnostic("capture_dropped", f"{dropped} packets dropped by the kernel (its capture buffer was "
                         f"full) and {interface_dropped} by the interface: the capture has holes there")
