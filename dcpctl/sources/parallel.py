"""Decoding captures on two cores: the stateful half in a child process, the records in this one.

Theory of operation. Everything that needs the capture's order and state (reading frames, TCP reassembly,
framing, decoding enough to follow each connection's negotiation and streams) runs once, in a forked
child, as :class:`CaptureDecoder` with ``defer``: each message comes out as plain data (its bytes, the
options it was decoded with, and what the tracker found). The child sends them in batches over a pipe
(``marshal``: plain data only, nothing executable crosses). This process decodes each message again from
its bytes (the decoder is a pure function of bytes and options) and annotates it with
:func:`finish_message`, the serial path's own function, so both paths give identical items in identical
order; only the work is split: the record and its JSON, the costlier half, run here, next to the writer.

The child never writes to standard output. Errors reading a file travel as items and are raised here as
the serial path raises them. When this side stops early (``--count``, a closed pipe, Ctrl-C), the child is
terminated and reaped; a child that dies without its end marker is reported, never silently truncated.
"""

from __future__ import annotations

import contextlib
import marshal
import multiprocessing
import os
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any, Final

from dcpctl.protocol.diagnostic import Diagnostic
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, Skipped
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.sources.capture import CaptureDecoder, Item, finish_message
from dcpctl.sources.pcap import CaptureError, read_segments

BATCH: Final = 2048  # items per pipe message: large enough to amortise, small enough to stream

# item tags (first element of every non-message tuple; messages are the untagged 9-tuples)
_SKIPPED, _NOTICE, _FILE, _PROGRESS, _ERROR, _DONE = range(6)


class ChildError(Exception):
    """The decoding process ended without finishing (killed, out of memory)."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _produce(pipe: Connection, paths: list[str], options: DecodeOptions, ports: frozenset[int],
             max_body_length: int) -> None:
    batch: list[Any] = []
    send = pipe.send_bytes
    dumps = marshal.dumps
    read = 0

    def tap(_ts: float, data: bytes, _wire: int) -> None:
        nonlocal read
        read += len(data) + 16

    try:
        for path in paths:
            batch.append((_FILE, path))
            decoder = CaptureDecoder(options, ports, max_body_length, defer=True)
            try:
                for segment in read_segments(path, ports, tap=tap):
                    batch.extend(map(_plain, decoder.feed(segment)))
                    if len(batch) >= BATCH:
                        batch.append((_PROGRESS, read))
                        read = 0
                        send(dumps(batch))
                        batch = []
                batch.extend(_plain(item) for item in decoder.finish())
            except (CaptureError, FileNotFoundError) as exc:
                batch.append((_ERROR, path, str(exc), isinstance(exc, FileNotFoundError)))
                send(dumps(batch))
                return
        batch.append((_PROGRESS, read))
        batch.append((_DONE,))
        send(dumps(batch))
    except (KeyboardInterrupt, BrokenPipeError, OSError):
        pass  # the reading side went away or the user interrupted: it reports, not us
    finally:
        pipe.close()


def _plain(item: Any) -> Any:
    if isinstance(item, tuple):
        return item
    if isinstance(item, Skipped):
        return (_SKIPPED, item.offset, item.length, item.reason)
    assert isinstance(item, Diagnostic)
    return (_NOTICE, item.name, item.message, item.offset, item.length)


def decode_files(paths: list[str], options: DecodeOptions, ports: frozenset[int],
                 max_body_length: int = DEFAULT_MAX_BODY_LENGTH, *,
                 on_file: Callable[[str], None] | None = None,
                 on_progress: Callable[[int], None] | None = None) -> Iterator[Item]:
    """The items ``decode_segments`` gives for each file in turn, decoded on two cores.

    Raises what reading a file raises (``CaptureError``, ``FileNotFoundError``), after the items before it.
    """
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_produce, args=(sender, paths, options, ports, max_body_length),
                            name="dcpctl-decode", daemon=True)
    child.start()
    sender.close()
    variants: dict[bool | None, DecodeOptions] = {}
    loads = marshal.loads
    try:
        while True:
            try:
                batch = loads(receiver.recv_bytes())
            except EOFError:
                raise ChildError(f"the decoding process ended unexpectedly (exit {child.exitcode})") from None
            for item in batch:
                if len(item) == 9:
                    raw, offset, collections, ts, label, from_client, frames, fields, diags = item
                    item_options = variants.get(collections)
                    if item_options is None:
                        item_options = variants[collections] = DecodeOptions(
                            options.dialect, collections, options.show_secrets, options.lenient)
                    yield finish_message(decode(raw, offset, item_options), ts, label, from_client, frames,
                                         fields, [Diagnostic(*d) for d in diags] if diags else [])
                    continue
                tag = item[0]
                if tag == _SKIPPED:
                    yield Skipped(*item[1:])
                elif tag == _NOTICE:
                    yield Diagnostic(*item[1:])
                elif tag == _FILE:
                    if on_file is not None:
                        on_file(item[1])
                elif tag == _PROGRESS:
                    if on_progress is not None:
                        on_progress(item[1])
                elif tag == _ERROR:
                    raise (FileNotFoundError if item[3] else CaptureError)(item[2])
                else:
                    return
    finally:
        receiver.close()
        if child.is_alive():
            child.terminate()
        with contextlib.suppress(Exception):
            child.join(5)
