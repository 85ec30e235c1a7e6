"""``dcpctl stream``: kcat for DCP: stream a bucket live, printed like a capture."""

from __future__ import annotations

import atexit
import contextlib
import functools
import ipaddress
import select
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final, TypeVar

import orjson
import typer

from dcpctl.client.connection import AddressError, Connection
from dcpctl.client.state import StateError, check_writable
from dcpctl.client.streamer import DEFAULT_BUFFER, DEFAULT_NOOP_INTERVAL, SAVE_EVERY_ITEMS, Streamer, StreamOptions
from dcpctl.commands._live import (
    MAX_BUFFER_SIZE,
    HostArgument,
    Login,
    client_errors,
    noop_interval_of_option,
    seqno_or,
    window_of,
)
from dcpctl.commands._options import (
    STOP_SIGNALS,
    Base64Option,
    LocalTimeOption,
    Rotation,
    TemplateOption,
    env_of,
    line_template_of,
    live_capture_path,
    option_groups,
    parse_ranges,
)
from dcpctl.commands.redact import Redaction, SaltFileOption, given_salt, replaced_lines, salt_of
from dcpctl.dcp.observed import Observed
from dcpctl.errortext import file_error
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.message import DecodeOptions, redacted
from dcpctl.redact.address import AddressMap
from dcpctl.redact.core import ByteStreamRedactor, Redactor
from dcpctl.render.env import OutputError, discard_stdout
from dcpctl.render.lines import ItemLines
from dcpctl.render.output import Format, emit
from dcpctl.render.summary import print_stream_summary
from dcpctl.safetext import shown
from dcpctl.sources.pcapwriter import TcpConversation
from dcpctl.sources.savefiles import Savefiles, buffered
from dcpctl.stopsignal import starting

_T = TypeVar("_T")


class OnRollback(StrEnum):
    FOLLOW = "follow"
    FAIL = "fail"
    REPORT = "report"


@option_groups
def stream(
    ctx: typer.Context,
    host: HostArgument,
    login: Login = Login(),
    vbuckets: Annotated[list[str] | None, typer.Option("--vbuckets", help="vbuckets to stream: 0-1023,5 "
                                                       "(repeatable; default all).", metavar="RANGES")] = None,
    start: Annotated[str, typer.Option("--from", help="beginning, now, resume (from --state) or a seqno.",
                                       metavar="beginning|now|resume|SEQNO")]
    = "beginning",
    until: Annotated[str, typer.Option("--until", help="forever, now (the high seqnos at start; then exit 0) or "
                                       "a seqno.", metavar="forever|now|SEQNO")] = "forever",
    collections: Annotated[str | None, typer.Option("--collections", help="Only these collections, comma "
                                                    "separated: scope.collection names or hex ids; needs HELLO "
                                                    "Collections.", metavar="NAMES|IDS")] = None,
    scope: Annotated[str | None, typer.Option("--scope", help="Only this scope: its name or its hex id (a name "
                                              "that reads as hex: NAME.).", metavar="NAME|ID")] = None,
    stream_id: Annotated[int | None, typer.Option("--stream-id", min=1, max=65535, help="Enable stream ids and "
                                                  "use this one.", metavar="N")] = None,
    no_value: Annotated[bool, typer.Option("--no-value", help="Keys and metadata only (DCP_OPEN NoValue).")]
    = False,
    xattrs: Annotated[bool, typer.Option("--xattrs", help="Include extended attributes.")] = False,
    control: Annotated[list[str] | None, typer.Option("--control", help="Extra DCP_CONTROL key=value "
                                                      "(repeatable).", metavar="KEY=VALUE")] = None,
    buffer_size: Annotated[int, typer.Option("--buffer-size", min=0, max=MAX_BUFFER_SIZE, help="connection_buffer_"
                                             "size: the flow-control window in bytes (acknowledged at half).",
                                             metavar="BYTES")]
    = DEFAULT_BUFFER,
    noop_interval: Annotated[int, typer.Option("--noop-interval", min=1, help="Seconds between the server's "
                                               "noops.", metavar="SECONDS")] = DEFAULT_NOOP_INTERVAL,
    state: Annotated[Path | None, typer.Option("--state", help="Where each vbucket got to, saved atomically; "
                                               "--from resume continues from it.", metavar="FILE")] = None,
    save_items: Annotated[int, typer.Option("--save-items", min=1, metavar="N", help="Save --state at least every "
                                            "N items (and every second): at most what a kill -9 repeats.")]
    = SAVE_EVERY_ITEMS,
    count: Annotated[int | None, typer.Option("--count", "-c", min=1, help="Stop after N mutations, deletions "
                                              "and expirations.", metavar="N")] = None,
    on_rollback: Annotated[OnRollback, typer.Option("--on-rollback", help="follow: explain, roll back, retry; "
                                                    "fail: exit 9; report: explain and leave the vbucket.")]
    = OnRollback.FOLLOW,
    fmt: Annotated[Format | None, typer.Option("--format", "-F", help="pretty on a terminal, jsonl when piped.")]
    = None,
    template: TemplateOption = None,
    write: Annotated[Path | None, typer.Option("--write", "-w", help="Save the whole exchange as a pcap that "
                                               "dcpctl decode and Wireshark read.", metavar="FILE")] = None,
    rotation: Rotation = Rotation(),
    redact: Annotated[bool, typer.Option("--redact", help="--write saves keys, values, xattr values and SASL "
                                         "exchanges redacted, as dcpctl redact does.")] = False,
    salt_file: SaltFileOption = None,
    redaction: Redaction = Redaction(),
    summary: Annotated[bool, typer.Option("--summary", help="Per-vbucket counts, seqno ranges and rate on "
                                          "standard error at the end (alone: no per-message output).")] = False,
    base64: Base64Option = False,
    local_time: LocalTimeOption = False,
) -> None:
    """Stream DCP from a cluster: every vbucket from its active node, printed as decode prints captures."""
    env = env_of(ctx)
    if redact and write is None:
        raise CommandError("--redact redacts what --write saves: give --write FILE", ExitCode.USAGE)
    file_size = rotation.size(write)
    live_capture_path(write, "--write")
    if not redact:  # what to keep without --redact is said at once; a salt is made below, once all is checked
        redaction.live(redact, salt_file, env, "--write", frozenset())
    seqno_or(start, "--from", ("beginning", "now", "resume"))
    seqno_or(until, "--until", ("forever", "now"))
    if start.isdigit() and until.isdigit() and int(start) > int(until):  # the server would stream nothing
        raise CommandError(f"--from {start} is past --until {until}: a stream delivers the items after --from "
                           "up to --until", ExitCode.USAGE)
    line_template = line_template_of(template, fmt)
    if state is not None:
        try:
            check_writable(state)  # before connecting: a read-only or missing directory fails at once
        except StateError as exc:
            raise CommandError(f"--state: {exc}", ExitCode.INPUT) from None
    if start == "resume" and state is None:
        raise CommandError("--from resume needs --state FILE", ExitCode.USAGE)
    if collections and scope:
        raise CommandError("--collections and --scope exclude each other (the server answers Einval)",
                           ExitCode.USAGE)
    collection_ids, collection_paths = _collections(collections) if collections else ([], ())
    scope_id, scope_path = _scope(scope) if scope else (None, None)
    controls = {}
    for item in control or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CommandError(f"--control: key=value, not {item!r}", ExitCode.USAGE)
        controls[name] = value
    if controls.get("enable_out_of_order_snapshots", "false") != "false":
        # an OSO backfill sends its items in key order (reference 3.19): the resume point --state saves after
        # each item and --until's end would then pass items not yet sent, which a resume would never send
        raise CommandError("--control enable_out_of_order_snapshots: stream follows each vbucket's seqnos (its "
                           "--state resume point, --until), which an OSO snapshot's key order would skip past",
                           ExitCode.USAGE)
    if "connection_buffer_size" in controls:  # the window acknowledgements are counted against
        buffer_size = window_of(controls["connection_buffer_size"], "--control connection_buffer_size")
    noop_seconds: float = noop_interval
    if "set_noop_interval" in controls:  # the interval the dead-connection check waits for
        noop_seconds = noop_interval_of_option(controls["set_noop_interval"], "--control set_noop_interval")
    password = login.password(env)
    salt = given_salt(salt_file) if redact else None  # a bad --salt-file is said before the file is made
    options = StreamOptions(
        login.bucket, login.user, password, login.sasl_mech, login.tls_options(), login.timeout,
        parse_ranges(vbuckets) if vbuckets else None, start,
        until, collection_ids or None, scope_id, stream_id, no_value, xattrs, controls, buffer_size,
        noop_seconds, count, on_rollback.value, state, save_items,
        quiet=summary and fmt is None and template is None and write is None,
        max_scram_iterations=login.max_scram_iterations, collection_paths=collection_paths, scope_path=scope_path)
    output = env.output_format(fmt, Format.PRETTY, Format.JSONL)
    binary = getattr(env.stdout, "buffer", None)
    if output is Format.JSONL and template is None and not options.quiet and binary is not None:
        options.line_maker = _JsonLines()  # plain items go out as lines from a template (the JSON of their record)
    errors = env.error_console()
    stopped_by: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        stopped_by.append(sig)
        streamer.stop()

    signals = _StopSignals(stop, lambda: streamer.requested)  # still connecting: stops at once, nothing to save

    def notice(message: str) -> None:
        closing = signals.closing
        try:
            # standard error gone (its terminal closed): the stream still stops well
            with contextlib.suppress(OSError), signals.cutting(env.stderr):
                errors.print(f"dcpctl: {shown(message)}", style="yellow", markup=False, highlight=False)
        except KeyboardInterrupt:
            if not closing:  # a stop at once, while streaming; while closing, the notice was cut short
                raise

    capture = _Capture(write, None, file_size, rotation.file_count, rotation.rotate_seconds) \
        if write is not None else None
    if capture is not None and redact:
        # a random salt is printed once: not for a run the command line, a missing password or a --write file
        # that cannot be made stops first
        capture.redact_with(redaction.redactor(salt if salt is not None else salt_of(None, env),
                                               _seed_ports(login, host) if redaction.map_addresses else frozenset()))

    def flush() -> None:
        """Everything written so far reaches its file: before a save, the positions count only that. While
        closing, a signal cuts it only if standard output is not taking more (KeyboardInterrupt: no save)."""
        if capture is not None:
            capture.flush()
        with signals.cutting(env.stdout):
            env.stdout.flush()

    try:
        streamer = Streamer(host, options, notice=notice, tap=capture.tap if capture is not None else None,
                            before_save=flush, before_wait=env.stdout.flush)
    except StateError as exc:
        if capture is not None:
            capture.close()
        raise CommandError(str(exc), ExitCode.INPUT) from None

    def deliver() -> None:
        """The messages to standard output until the streams end or a signal stops them; then the output is
        flushed. From the last message on, no signal cuts the save (closing, see _StopSignals)."""
        try:
            try:
                messages = streamer.messages()
                if summary and fmt is None and template is None:
                    for _ in messages:
                        pass
                elif line_template is not None:
                    emit(messages, output, env, base64=base64, template=line_template)
                elif options.line_maker is not None and binary is not None:
                    # plain items come as their lines, written as they are; the rest is rendered as usual
                    emit(_lines_written(messages, binary.write), output, env, base64=base64, local_time=local_time)
                else:
                    emit(messages, output, env, base64=base64, local_time=local_time)  # flushed when it waits
            finally:
                signals.closing = True
        except KeyboardInterrupt:
            notice("interrupted again: stopping at once and saving the state" if streamer.interrupted
                   else "interrupted while connecting")
        if stopped_by:
            what = "interrupted" if stopped_by[0] == signal.SIGINT else stopped_by[0].name
            notice(f"{what}: closing the streams and saving the state")
        flush()

    def close(*, saving: bool, failing: bool) -> bool:
        """The streams closed and the positions saved (if ``saving``), then the capture file closed; returns
        whether a signal cut the flush before the save (the last save then stands)."""
        try:
            streamer.close(save=saving)
        except KeyboardInterrupt:  # the flush before the save was cut: the save was not made
            return True
        except StateError as exc:
            if not failing:
                raise CommandError(str(exc), ExitCode.INPUT) from None
            notice(str(exc))  # the first failure is the error; this one is said too
        finally:
            if capture is not None:
                capture.close(quiet=failing)
        return False

    saving = True  # nothing written was lost: the positions may be saved at the end
    failing = False
    cut = False  # while closing, a signal cut short output the reader was not taking: the last save stands
    with signals.installed():
        with client_errors():
            try:
                deliver()
            except KeyboardInterrupt:  # closing: only a write the reader was not taking is cut
                cut = True
            except BaseException as exc:
                failing = True
                # the output failed (or the state file): the last save, which counted only what had been flushed
                # before it, stands; the connector's failures are ClientErrors, the state file's StateErrors
                saving = not isinstance(exc, (OSError, _OutputError, StateError))
                if isinstance(exc, StateError):
                    raise CommandError(str(exc), ExitCode.INPUT) from None
                if isinstance(exc, OSError) and not isinstance(exc, (BrokenPipeError, OutputError)):
                    # standard output's own failures are said once, at the top (the reader gone is quiet)
                    raise OutputError(exc.errno, exc.strerror or str(exc)) from None
                raise
            finally:
                cut = close(saving=saving and not cut, failing=failing) or cut
        if cut:
            discard_stdout()  # what it still holds would block the last flush again
            notice("standard output was not taking more: what it had not taken is dropped, and the state keeps "
                   "its last save (a resume delivers the items since it again)")
        try:  # a signal may cut the last output short (a reader that stopped reading), never the exit status
            with signals.cutting(env.stderr):
                if capture is not None and capture.redactor is not None:
                    mapped = capture.addresses.counts() if capture.addresses is not None else Counter[str]()
                    lines = [f"redacted in {write}:", *replaced_lines(capture.redactor.counts + mapped)]
                    env.stderr.write("".join(f"dcpctl: {shown(line)}\n" for line in lines))
                if summary:
                    _print_summary(streamer, env)
            with signals.cutting(env.stdout):
                env.stdout.flush()  # here, while a signal cannot kill dcpctl, not after the command returns
        except KeyboardInterrupt:
            discard_stdout()


SAME_STOP: Final = 0.2  # seconds: a stop signal again within this is the first one delivered twice


class _StopSignals:
    """SIGINT, SIGTERM and SIGHUP from the start of ``dcpctl stream`` to its last output, through one handler
    whose state says what a signal does, so that no signal finds Python's defaults (a kill, exit 130) or cuts
    the save:

    - connecting (no stream asked for yet): stop at once (KeyboardInterrupt): nothing to close or save;
    - streaming: the first asks the streamer to stop at its next safe point; another stops at once
      (KeyboardInterrupt: a write a reader that never reads has blocked) and closing begins, unless it came
      within :data:`SAME_STOP` of the first: GNU timeout passes a signal it gets on to its child and to the
      child's process group, so the child may get it twice, one stop;
    - closing (the output flushed, the state saved, the streams closed, the summary written): noted, nothing
      more, except that one cuts short a write (KeyboardInterrupt) to a descriptor that does not take more,
      whose reader stopped reading: the caller then keeps the last save if that was output a save would count.
    A change of state is one attribute set, so no signal falls between two handlers."""

    def __init__(self, stop: Callable[[signal.Signals], None], started: Callable[[], bool]) -> None:
        self.stop, self.started = stop, started
        self.stopping = False  # the first signal came while streaming
        self.stopped_at = 0.0  # when (time.monotonic)
        self.closing = False
        self.cuttable: int | None = None  # while closing, the descriptor being written: its blocked write is cut

    def __call__(self, signum: int, _frame: object) -> None:
        if self.closing:
            if self.cuttable is not None and not _writable(self.cuttable):
                raise KeyboardInterrupt
            return
        if self.stopping and time.monotonic() - self.stopped_at < SAME_STOP:
            return  # the first one again, passed on to the process group too
        if self.stopping or not self.started():
            self.closing = True  # set before the raise: the save that follows is never cut
            raise KeyboardInterrupt
        self.stopping, self.stopped_at = True, time.monotonic()
        self.stop(signal.Signals(signum))

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The handler, from here to the end of the block; the caller's handlers back then (a test runs
        commands in its own process), and at the process's exit the signals ignored (_ignored_at_exit)."""
        try:
            previous = {sig: signal.signal(sig, self) for sig in STOP_SIGNALS}
        except ValueError:  # not the main thread, which alone can own signals: they stay as they are
            yield
            return
        atexit.unregister(_ignored_at_exit)  # once, however many runs
        atexit.register(_ignored_at_exit)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                # the handler dcpctl.start installed means the process ends with this command: the
                # signals stay ignored from here, not only from the atexit hook on
                signal.signal(sig, signal.SIG_IGN if handler is starting else handler)

    @contextlib.contextmanager
    def cutting(self, stream: object) -> Iterator[None]:
        """While closing, a signal may cut short what is written to ``stream`` inside, if it does not take more."""
        outer, self.cuttable = self.cuttable, _descriptor(stream)
        try:
            yield
        finally:
            self.cuttable = outer


def _ignored_at_exit() -> None:
    """At exit, once ``dcpctl stream`` has saved and written everything: Python then puts its signal handlers
    back to the defaults and spends tens of ms tearing down, when a second stop signal would kill dcpctl
    (129, 130, 143) after a clean stop. Ignored signals stay ignored through the teardown."""
    with contextlib.suppress(ValueError):  # not the main thread
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def _descriptor(stream: object) -> int | None:
    try:
        return int(stream.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO)
        return None


def _writable(fd: int) -> bool:
    """Whether ``fd`` takes a write now: a file always, a pipe or terminal while its reader reads."""
    try:
        return bool(select.select([], [fd], [], 0)[1])
    except (OSError, ValueError):  # a descriptor that cannot be polled fails its writes, it does not block them
        return True


class _JsonLines:
    """--format jsonl's plain items, written straight from the plain readers' messages: each item shape's
    template is filled (what ``render.record.record`` would give, a test holds them to it)."""

    def lines(self, connection: str) -> ItemLines:
        return ItemLines({"ts": None, "connection": connection, "direction": "server>client"}, ("ts",))

    def lead(self, ts: float) -> tuple[bytes, ...]:
        return (orjson.dumps(ts),)


class _OutputError(CommandError):
    """An output (standard output, the --write file) could not be written: one line naming it, exit 3."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.INPUT)


class _Capture:
    """--write FILE: the whole exchange as a pcap (with -C, a ring of them). A write that fails (a full or
    read-only disk), or a next file that cannot be opened, is one error naming the file; after it, nothing
    more is written."""

    def __init__(self, path: Path, redactor: Redactor | None = None, size: int | None = None,
                 count: int | None = None, seconds: float | None = None) -> None:
        self.path = path
        self.redactor: Redactor | None = None
        self.addresses: AddressMap | None = None
        if redactor is not None:
            self.redact_with(redactor)
        self.redacting: dict[tuple[int, bool], ByteStreamRedactor] = {}  # per connection and direction
        self.failed = False
        self.conversations: dict[int, TcpConversation] = {}
        try:
            self.writer = Savefiles(path, size=size, count=count, opener=buffered, seconds=seconds)
        except OSError as exc:
            raise CommandError(file_error(f"--write: {path}", exc), ExitCode.INPUT) from None

    def redact_with(self, redactor: Redactor) -> None:
        """What is written from now on goes through ``redactor`` (its address map, if any, maps the frames)."""
        self.redactor, self.addresses = redactor, redactor.addresses

    def _guarded(self, write: Callable[[], _T]) -> _T:
        try:
            return write()
        except OSError as exc:
            self.failed = True
            # writing this file, or opening the next one (-C)
            raise _OutputError(f"{exc.filename or self.writer.name}: {exc.strerror or exc}") from None

    def _address(self, address: tuple[str, int], *, client: bool) -> tuple[str, int]:
        """An endpoint as the file shows it: mapped under --map-addresses (the client's port too, a server's
        kept, as redact maps a capture)."""
        if self.addresses is None:
            return address
        host = str(ipaddress.ip_address(self.addresses(ipaddress.ip_address(address[0]).packed)))
        return host, self.addresses.port(address[1]) if client else address[1]

    def tap(self, conn: Connection, from_client: bool, data: bytes) -> None:
        if self.failed:
            return
        conversation = self.conversations.get(id(conn))
        if conversation is None:
            # by address: a host name (localhost) is what the client resolved, not what a packet carries
            conversation = TcpConversation(self.writer, self._address(conn.local, client=True),
                                           self._address(conn.peer, client=False), ts=time.time())
            self.conversations[id(conn)] = conversation
            self._guarded(conversation.handshake)
        if self.redactor is not None:  # whole messages, redacted: a message is held until its last byte
            direction = self.redacting.setdefault((id(conn), from_client), ByteStreamRedactor(self.redactor))
            data = direction.feed(data, conn.options)
            if not data:
                return
        elif from_client:  # SASL values the client sent are masked: with PLAIN, one of them is the password
            data = redacted(data)
        self._guarded(lambda: conversation.send(from_client, data, ts=time.time()))

    def flush(self) -> None:
        if not self.failed:
            self._guarded(self.writer.flush)

    def close(self, *, quiet: bool = False) -> None:
        """Flush and close; ``quiet``: another error is already being reported (the file is closed anyway),
        and a capture that recorded no connection is removed rather than left as a bare header."""
        for (conn_id, from_client), direction in self.redacting.items():  # a message the stop cut short
            conversation = self.conversations.get(conn_id)
            tail = direction.finish(DecodeOptions())
            if tail and conversation is not None and not self.failed:
                with contextlib.suppress(_OutputError):
                    self._guarded(functools.partial(conversation.send, from_client, tail, ts=time.time()))
        self.redacting.clear()
        try:
            self._guarded(self.writer.close)
        except _OutputError:
            if not quiet:
                raise
        finally:
            if quiet and not self.conversations:
                self.writer.name.unlink(missing_ok=True)


def _seed_ports(login: Login, host: str) -> frozenset[int]:
    """The seed node's port, a server's: --map-addresses never maps a client's port onto it. A host that does
    not parse gives none (connecting says what is wrong with it)."""
    try:
        return frozenset({login.seed(host, login.tls_options())[1]})
    except AddressError:
        return frozenset()


def _hex(text: str) -> int | None:
    """A collection or scope id as --collections and --scope take one (hex, 0x optional, u32), else None."""
    digits = text.removeprefix("0x").removeprefix("0X")
    if not digits or any(c not in "0123456789abcdefABCDEF" for c in digits) or len(digits) > 8:
        return None
    return int(digits, 16)


def _collections(text: str) -> tuple[list[int], tuple[str, ...]]:
    """--collections: the ids given (hex) and the paths (scope.collection: a name always has its dot), which
    the streamer asks the server for."""
    ids: list[int] = []
    paths: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        scope_name, dot, name = part.partition(".")
        if dot:
            if not scope_name or not name or "." in name:
                raise CommandError(f"--collections: {shown(part)} is not scope.collection", ExitCode.USAGE)
            paths.append(part)
        elif (number := _hex(part)) is not None:
            ids.append(number)
        else:
            raise CommandError(f"--collections: {shown(part)} is neither a hex id nor scope.collection",
                               ExitCode.USAGE)
    return ids, tuple(paths)


def _scope(text: str) -> tuple[int | None, str | None]:
    """--scope: an id (hex), or a name; a name that reads as hex is written with a dot after it (beef.)."""
    text = text.strip()
    if text.endswith(".") and len(text) > 1 and "." not in text[:-1]:
        return None, text[:-1]
    if "." in text:
        raise CommandError(f"--scope: {shown(text)} is a scope's name or id, not a path", ExitCode.USAGE)
    number = _hex(text)
    return (number, None) if number is not None else (None, text)


def _lines_written(events: Iterator[Observed | bytes], write: Callable[[bytes], object]) -> Iterator[Observed]:
    """The runs of JSON lines among the streamer's events written at once (the LineMaker's), the messages
    passed on; a run is written before the streamer asks for more, so its positions count it."""
    for event in events:
        if isinstance(event, bytes):
            write(event)
        else:
            yield event


def _print_summary(streamer: Streamer, env: Any) -> None:
    rows, total = streamer.summary()
    print_stream_summary(rows, total, env.error_console())
