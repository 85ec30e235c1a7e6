"""The wire format is declared once, in ``dcpctl/protocol``: outside it no code restates an opcode, status or
magic as a hex number, nor the 24-byte header as a ``struct`` format. Names come from the enum classes
(``Opcode.DCP_MUTATION``), opcode sets from the registry rows, header codecs and offsets from the header's
grammar (``HEADER_LAYOUT``). Each exception below is a line that is not the DCP wire format, with its reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dcpctl"
PROTOCOL = PACKAGE / "protocol"

# A two-digit hex number: how opcodes (0x57), statuses (0x23), magics (0x80) and features (0x12) get written.
HEX_CODE = re.compile(r"\b0[xX][0-9a-fA-F]{2}\b")
# A struct format for the DCP header: it starts with magic, opcode and key length (">BBH...").
HEADER_FORMAT = re.compile(r"""["'][<>!=@]?BBH""")

# (path under dcpctl/, text the line contains) -> why the literal there is not the DCP wire format.
ALLOWED: dict[tuple[str, str], str] = {
    ("safetext.py", "if code <= 0xFF:"): "a Unicode code point: one byte's escape",
    ("sources/packets.py", "ord(c) < 0x20"): "ASCII control characters in text",
    ("sources/hextext.py", "``  4| 0x28 | 0x00 | ...``"): "the docstring's example of a document's table",
    ("sources/hextext.py", "``0x48``, ``48``"): "the docstring's example of a table cell",
    ("sources/pcap.py", "ethertype == 0x0800 and version_ihl == 0x45"): "Ethernet and IPv4 codes",
    ("sources/pcap.py", "(version_ihl & 0x0F)"): "the IPv4 header length nibble",
    ("sources/pcapwriter.py", "FIN, SYN, RST, PSH, ACK ="): "TCP flag bits",
    ("sources/pcapwriter.py", 'struct.pack("!BBHHHBBH4s4s", 0x45'): "an IPv4 header, not the DCP one",
    ("sources/tcp.py", "FIN, SYN, RST, ACK ="): "TCP flag bits",
    ("sources/pcapng.py", "if value[0] & 0x80 else"): "a pcapng timestamp resolution: its base bit and exponent",
    ("client/consumer.py", "shape & 0xFF"): "unpacks the extras length from the quiet path's shape key",
    ("commands/decode.py", "a number (0x57, 87) standing for its names"): "help text: how a user writes a number",
}


def _findings() -> tuple[list[str], set[tuple[str, str]]]:
    found, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if PROTOCOL in path.parents:
            continue
        name = path.relative_to(PACKAGE).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not (HEX_CODE.search(line) or HEADER_FORMAT.search(line)):
                continue
            allowed = [key for key in ALLOWED if key[0] == name and key[1] in line]
            if allowed:
                used.update(allowed)
            else:
                found.append(f"dcpctl/{name}:{number}: {line.strip()}")
    return found, used


def test_no_hex_code_or_header_format_outside_protocol() -> None:
    found, _ = _findings()
    assert not found, ("a hex code or a DCP header struct format outside dcpctl/protocol (use the enum members, "
                       "the registry's opcode sets and HEADER_LAYOUT, or add an exception with its reason):\n"
                       + "\n".join(found))


def test_every_exception_is_still_needed() -> None:
    _, used = _findings()
    assert set(ALLOWED) - used == set()


@pytest.mark.parametrize("line", ['HEADER = struct.Struct(">BBHBBHIIQ")', "if opcode == 0x57:",
                                  "ITEMS = frozenset({0x57, 0x58})", "_SCAN = struct.Struct('>BBHBBHII')"])
def test_the_patterns_catch_what_they_are_for(line: str) -> None:
    assert HEX_CODE.search(line) or HEADER_FORMAT.search(line)
