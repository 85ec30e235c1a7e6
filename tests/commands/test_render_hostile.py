"""What the renderers show of hostile packets: escaped text, masked secrets, bounded big fields (issue 17)."""

from __future__ import annotations

import io
import re
import struct
from pathlib import Path

import pytest
from capturekit import session_packets, write_capture

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.protocol.encode import encode
from dcpctl.protocol.value import Xattr, build_xattrs
from dcpctl.render.env import Environment
from dcpctl.render.output import MAX_FIELD_BYTES

EXTRAS = struct.pack(">QQIIIHB", 5, 1, 0, 0, 0, 0, 0)
TITLE, CLEAR = "\x1b]0;owned\x07", "\x1b[2J"


def _run(args: list[str], stdin: bytes) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(stdin), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=160)
    return main(args, env), out.getvalue(), err.getvalue()


def _mutation(key: bytes, value: bytes, datatype: int = 0) -> bytes:
    header = struct.pack(">BBHBBHIIQ", 0x80, 0x57, len(key), len(EXTRAS), datatype, 0,
                         len(EXTRAS) + len(key) + len(value), 0, 0)
    return header + EXTRAS + key + value


def _sasl(value: str) -> bytes:
    return encode({"magic": "ClientRequest", "opcode": "SASL_AUTH", "key": "PLAIN", "value": value},
                  fix_lengths=True)


def _hostile() -> bytes:
    xattrs = build_xattrs([Xattr(f"_k{TITLE}", f"v{CLEAR}\n@99 DCP_MUTATION vb 1 forged")])
    return _mutation(f"key{TITLE}".encode(), xattrs + f'{{"a":"{CLEAR}"}}\n@7 forged'.encode(), datatype=4)


@pytest.mark.parametrize("fmt", ["pretty", "hexdump"])
def test_wire_text_is_escaped(fmt: str) -> None:
    code, out, _ = _run(["hexdump", "-F", fmt, "-"], _hostile())
    assert code == ExitCode.OK
    assert "\x1b" not in out
    assert "\\x1b]0;owned" in out
    assert not re.search(r"^@(99|7) ", out, re.MULTILINE)  # no line forged by a newline in a value


def test_bytes_that_are_not_utf8_are_escaped_once() -> None:
    # a key and a value of raw bytes: each byte written as one \xNN, not as a backslash-escape of one
    code, out, _ = _run(["hexdump", "-"], _mutation(b"k\xab", b"v\xff\xfe"))
    assert code == ExitCode.OK
    assert "'k\\xab'" in out
    assert "'v\\xff\\xfe'" in out
    assert "\\\\x" not in out


def test_an_error_message_is_escaped_once() -> None:
    code, _, err = _run(["hexdump", f"no{TITLE}such"], b"")
    assert code == ExitCode.INPUT
    assert err == "dcpctl: error: no\\x1b]0;owned\\x07such: no such file\n"


@pytest.mark.parametrize("fmt", ["hexdump", "pretty"])
def test_sasl_bytes_are_masked_unless_asked(fmt: str) -> None:
    packet = _sasl("\x00admin\x00hunter2")
    _, out, _ = _run(["hexdump", "-F", fmt, "-"], packet)
    assert "hunter2" not in out
    assert b"hunter2".hex()[:8] not in out.replace(" ", "")
    _, out, _ = _run(["hexdump", "-F", fmt, "--show-secrets", "-"], packet)
    assert "hunter2" in out or b"hunter2".hex() in out  # pretty shows a value with NULs in hex


@pytest.mark.parametrize("fmt", ["hexdump", "pretty"])
def test_a_big_field_shows_head_tail_and_size(fmt: str) -> None:
    size = 4 * 1024 * 1024
    value = b"a" * (size // 2) + b"z" * (size // 2)
    code, out, _ = _run(["hexdump", "-F", fmt, "-"], _mutation(b"k", value))
    assert code == ExitCode.OK
    assert len(out) < 20 * MAX_FIELD_BYTES
    assert str(size) in out
    if fmt == "hexdump":
        assert "61 61 61 61" in out
        assert "7a 7a 7a 7a" in out
        assert "--max-field-bytes 1024" in out
    else:
        assert "aaaa" in out
        assert "zzzz" in out
    _, wider, _ = _run(["hexdump", "-F", fmt, "--max-field-bytes", str(8 * MAX_FIELD_BYTES), "-"],
                       _mutation(b"k", value))
    assert len(wider) > 4 * len(out)


def test_a_big_declared_value_is_not_walked() -> None:
    hello = encode({"magic": "ClientRequest", "opcode": "HELLO", "key": "x", "features": [7] * 200_000},
                   fix_lengths=True)
    code, out, _ = _run(["hexdump", "-"], hello)
    assert code == ExitCode.OK
    assert "fields not listed" in out
    assert len(out.splitlines()) < 200


@pytest.mark.parametrize("fmt", ["hexdump", "pretty", "jsonl"])
def test_decode_masks_sasl_in_a_capture(fmt: str, tmp_path: Path) -> None:
    capture = tmp_path / "sasl.pcap"
    capture.write_bytes(write_capture([(True, _sasl("\x00admin\x00hunter2")), *session_packets()]))
    code, out, _ = _run(["decode", "-F", fmt, str(capture)], b"")
    assert code == ExitCode.OK
    assert "SASL_AUTH" in out
    assert "hunter2" not in out
    assert b"hunter2".hex()[:8] not in out.replace(" ", "")
