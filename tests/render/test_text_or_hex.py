"""A key or value is text when it is UTF-8 without control characters; what Python does not call printable
but a document holds (a no-break space, an emoji's zero-width joiner, a bidi mark, a line separator) is text
too: JSON carries it as it is, pretty output and templates escape it. The same in every reader's path."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from capturekit import write_capture

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import decode
from dcpctl.render.env import Environment
from dcpctl.render.record import record as record_of
from dcpctl.safetext import shown

TEXTS = ["caf\u00e9\u00a0cr\u00e8me", "family \U0001F468\u200d\U0001F469\u200d\U0001F467", "x\u202eevil",
         "tab\tand\nbreak"]
# controls, and the separators that readers of JSON lines splitting on every line end would cut a record at
BINARY = ["esc\x1b[2J", "nul\x00", "del\x7f", "c1\x85", "line\u2028separated", "para\u2029graph"]


def _mutation(key: str, value: str, datatype: int = 0) -> bytes:
    return encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 1, "opaque": 7, "by_seqno": 5,
                   "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0,
                   "datatype": datatype, "key": key.encode().hex(), "key_encoding": "hex",
                   "value": value.encode().hex(), "value_encoding": "hex"}, fix_lengths=True)


def _decoded(tmp_path: Path, packets: list[bytes], *args: str) -> str:
    capture = tmp_path / "t.pcap"
    capture.write_bytes(write_capture([(False, packet) for packet in packets]))
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=200)
    assert main(["decode", str(capture), *args], env) == ExitCode.OK
    return out.getvalue()


@pytest.mark.parametrize("text", TEXTS)
def test_a_document_s_text_is_text_in_every_path(tmp_path: Path, text: str) -> None:
    raw = _mutation(text, json.dumps({"name": text}, ensure_ascii=False), datatype=1)
    record = record_of(decode(raw))
    assert (record["key"], "key_encoding" in record, "value_encoding" in record) == (text, False, False)
    assert encode(record) == raw
    for jobs in ("1", "2"):  # the per-item fast path, and the general one
        [line] = _decoded(tmp_path, [raw], "-F", "jsonl", "-j", jobs).splitlines()
        assert json.loads(line)["key"] == text
    escaped = shown(text)  # pretty output and templates escape what would act on a terminal
    assert escaped in _decoded(tmp_path, [raw], "-F", "pretty")
    assert _decoded(tmp_path, [raw], "-f", "{key}").splitlines() == [escaped]
    assert all(c.isprintable() for c in escaped)


@pytest.mark.parametrize("text", BINARY)
def test_control_characters_make_a_key_binary(text: str) -> None:
    raw = _mutation(text, "v")
    record = record_of(decode(raw))
    assert (record["key"], record["key_encoding"]) == (text.encode().hex(), "hex")
    assert encode(record) == raw
