"""Packets written as text: binary, plain hex, xxd, hexdump -C and document byte tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dcpctl.sources.hextext import Chunk, HexTextError, parse_hex, parse_packets

SEEDS = Path(__file__).parents[3] / "shared" / "seeds"
HEADER = bytes.fromhex("8053000028000000000000280000100000000000")


def _seed(name: str) -> bytes:
    path = SEEDS / name
    if not path.is_file():
        pytest.skip(f"seed document {path} is not available")
    return path.read_bytes()


def _one(text: str) -> Chunk:
    chunks = parse_packets(text.encode())
    assert len(chunks) == 1
    return chunks[0]


# -- binary ---------------------------------------------------------------------------------------

def test_binary_is_returned_as_is() -> None:
    assert parse_packets(HEADER) == [Chunk(HEADER, 0, boundary=False)]


def test_utf8_with_control_bytes_is_binary() -> None:
    data = b"80 53\x00\x01 00"
    assert parse_packets(data) == [Chunk(data, 0, boundary=False)]


def test_empty_and_blank_input_have_no_chunks() -> None:
    assert parse_packets(b"") == []
    assert parse_packets(b"  \n# only a comment\n\n") == []


# -- plain hex ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "80 53 00 00",
    "0x80,0x53,0x00,0x00",
    "0X80, 0X53, 0x00, 0x00\n",
    "80:53:00:00",
    "8053 0000",
    "80530000",
    "  80 53\n\n  00 00  \r\n",
    "80 53 # magic, opcode\n# a comment line: zz\n00 00",
])
def test_plain_hex_forms(text: str) -> None:
    assert parse_hex(text) == bytes.fromhex("80530000")
    assert parse_packets(text.encode()) == [
        Chunk(bytes.fromhex("80530000"), 1, boundary=False)]


def test_plain_hex_chunk_starts_at_first_line_with_bytes() -> None:
    assert _one("# request\n\n80 53\n00 00\n").line == 3


@pytest.mark.parametrize(("text", "line", "what"), [
    ("80 53\n00 0", 2, "odd number of hex digits"),
    ("80 53\n\n805 300", 3, "odd number of hex digits"),
    ("0x8", 1, "odd number of hex digits"),
    ("80 53 magic", 1, "not hex: 'magic'"),
    ("80\n0x\n", 2, "not hex: '0x'"),
    ("80 g3", 1, "not hex: 'g3'"),
])
def test_plain_hex_errors_name_the_line(text: str, line: int, what: str) -> None:
    with pytest.raises(HexTextError, match=f"^line {line}: {what}") as info:
        parse_hex(text)
    assert info.value.line == line
    with pytest.raises(HexTextError, match=f"^line {line}: "):
        parse_packets(text.encode())


def test_prose_without_diagrams_is_a_plain_hex_error() -> None:
    with pytest.raises(HexTextError, match=r"^line 1: not hex: 'Sent'"):
        parse_packets(b"Sent by the consumer: 80 53\n")


# -- xxd and hexdump -C ----------------------------------------------------------------------------

XXD = """\
00000000: 8053 0000 2800 0000 0000 0028 0000 1000  .S..(......(....
00000010: 0000 0000 0000 0000 0000 0000 0000 0000  ................
*
00000040: 00ff eeff 7c7c 2020 3031                 ....||  01
"""
XXD_G1 = """\
00000000: 80 53 00 00 28 00 00 00 00 00 00 28 00 00 10 00  .S..(......(....
00000010: 00 ff ee ff 7c                                   ....|
"""
HEXDUMP = """\
00000000  80 53 00 00 28 00 00 00  00 00 00 28 00 00 10 00  |.S..(......(....|
00000010  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|
*
00000040  00 ff ee ff 7c 7c 20 20  30 31                    |....||  01|
0000004a
"""
DUMPED = (bytes.fromhex("80530000280000000000002800001000") + bytes(48)
          + bytes.fromhex("00ffeeff7c7c20203031"))


@pytest.mark.parametrize("text", [XXD, HEXDUMP, XXD.replace("\n", "\r\n")])
def test_dumps_ignore_the_text_column_and_expand_stars(text: str) -> None:
    assert parse_packets(text.encode()) == [Chunk(DUMPED, 1, boundary=False)]


def test_xxd_with_one_byte_groups() -> None:
    assert _one(XXD_G1).data == DUMPED[:16] + bytes.fromhex("00ffeeff7c")


def test_hexdump_star_before_the_final_offset() -> None:
    text = ("00000000  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|\n"
            "*\n00000030\n")
    assert _one(text).data == bytes(48)


def test_dumps_separated_by_blank_line_or_offset_zero_are_separate_chunks() -> None:
    again = XXD_G1.splitlines(keepends=True)[0]
    chunks = parse_packets((XXD + "\n" + XXD_G1 + again).encode())
    assert [(len(c.data), c.line, c.boundary) for c in chunks] == [
        (len(DUMPED), 1, False), (21, 6, False), (16, 8, False)]


def test_dump_may_start_at_an_offset() -> None:
    assert _one("00000100: 8053 0000  .S..\n00000104: 28    (\n").data == HEADER[:5]


@pytest.mark.parametrize(("text", "line", "what"), [
    ("00000000: 8053 0000  .S..\n00000008: 2800  (.\n", 2, "offset 0x8, expected 0x4"),
    ("*\n00000000: 8053  .S\n", 1, "'\\*' does not follow a line of bytes"),
    ("00000000: 8053  .S\n*\n00000005: 2800  (.\n", 3, "offset 0x5 does not end whole repeats"),
    ("00000000: 8053  .S\n*\n00000000: 2800  (.\n", 3, "offset 0x0 does not end whole repeats"),
    ("00000000: 8053  .S\n*\n1000000000: 2800  (.\n", 2, "'\\*' lines repeat more than 67108864"),
    ("00000000: 8053  .S\n*\n", 2, "'\\*' is not followed by an offset line"),
    ("00000000: 80zz  .S\n", 1, "not hex: '80zz'"),
    ("00000000: 805  .S\n", 1, "odd number of hex digits"),
    ("00000000  8053 0000  |.S..|\n00000004\n", 1, "hexdump -C byte is not two hex digits"),
])
def test_dump_errors_name_the_line(text: str, line: int, what: str) -> None:
    with pytest.raises(HexTextError, match=f"^line {line}: {what}"):
        parse_packets(text.encode())


# -- byte tables ----------------------------------------------------------------------------------

TABLE = """\
The request looks like this:

     Byte/     0       |       1       |       2       |       3       |
        /              |               |               |               |
       |0 1 2 3 4 5 6 7|0 1 2 3 4 5 6 7|0 1 2 3 4 5 6 7|0 1 2 3 4 5 6 7|
       +---------------+---------------+---------------+---------------+
      0| 0x80          | 0x53          | 0x00          | 0x00          |
       +---------------+---------------+---------------+---------------+
      4| 0x28          | 0x00          | 0x00          | 0x00          |
       +---------------+---------------+---------------+---------------+
    Field        (offset) (value)
    Magic        (0)    : 0x80
    Opcode       (1)    : 0x53

* **Flags** - 0x01 | 0x02 are the only flags.

      Byte/     0       |       1       |       2       |       3       |
     0|       81      |       01      |       00      |       0E      |
      +---------------+---------------+---------------+---------------+
     4|       4a      |       Ff      |
      +---------------+---------------+
"""


def test_each_diagram_is_one_packet_and_prose_is_ignored() -> None:
    assert parse_packets(TABLE.encode()) == [
        Chunk(bytes.fromhex("8053000028000000"), 7, boundary=True),
        Chunk(bytes.fromhex("8101000e4aff"), 18, boundary=True),
    ]


def test_layout_rows_are_skipped_and_annotated_cells_are_bytes() -> None:
    text = """\
      0| Flags                                                         |
       +---------------+---------------+---------------+---------------+
      4| RESERVED                                                      |
      0| 0x48 ('H')    | 0x69 ('i')    | 0x21 ('!')    |
      3| 0x7c          |
"""
    assert parse_packets(text.encode()) == [Chunk(b"Hi!|", 4, boundary=True)]


def test_adjacent_diagrams_split_at_offset_zero() -> None:
    text = "0| 0x80 | 0x53 |\n2| 0x00 |\n0| 0x81 |\n1| 0x53 |\n"
    assert [c.data for c in parse_packets(text.encode())] == [b"\x80\x53\x00", b"\x81\x53"]


def test_huge_row_offset_is_not_a_row() -> None:
    with pytest.raises(HexTextError, match=r"^line 1: not hex: '1111"):
        parse_packets(b"1" * 5000 + b"| 0x00 |\n")


def test_markdown_table_is_not_a_diagram_row() -> None:
    with pytest.raises(HexTextError, match=r"^line 1: odd number of hex digits in '0'"):
        parse_packets(b"0 | 0x80 | Magic |\n")


@pytest.mark.parametrize(("text", "line", "what"), [
    ("0| 0x80 | 0x53 |\n4| 0x00 |\n", 2, "byte-table row at offset 4, expected 2"),
    ("x\n 4| 0x28 | 0x00 |\n", 2, "byte-table row at offset 4 before any row at offset 0"),
    ("0| 0x80 | 0x53 |\n2| 0x00 | Key length |\n", 2, "byte-table row mixes bytes with 'Key"),
    ("0| 0x80 | 0x53 |\n2| 0x00 | 0x123 |\n", 2, "byte-table row mixes bytes with '0x123'"),
])
def test_diagram_errors_name_the_line(text: str, line: int, what: str) -> None:
    with pytest.raises(HexTextError, match=f"^line {line}: {what}"):
        parse_packets(text.encode())


def test_seed_stream_request_document() -> None:
    chunks = parse_packets(_seed("000_b8f71fd18ed91174.txt"))
    assert [len(c.data) for c in chunks] == [72, 32, 64, 88]
    assert all(c.boundary for c in chunks)
    first = chunks[0]
    assert first.data[:5] == bytes.fromhex("8053000028")
    assert first.data[-4:] == bytes.fromhex("00ffeeff")
    assert first.line == 77


def test_seed_upr_specification_without_0x() -> None:
    chunks = parse_packets(_seed("001_76bf363098cb3e8e.txt"))
    assert len(chunks) == 16
    assert all(c.boundary for c in chunks)
    assert chunks[0].data == bytes.fromhex("80010000" + "00" * 8 + "0000000a" + "00" * 8)
    assert chunks[0].line == 21
    assert chunks[1].data[:4] == bytes.fromhex("8001000e")
    assert len(chunks[1].data) == 70  # ends on a two-cell row at offset 68


# -- round trips ----------------------------------------------------------------------------------

def _text_column(line: bytes) -> str:
    return "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in line)


def _plain(data: bytes, style: int, width: int) -> str:
    words = [f"{b:02x}" for b in data] if style != 3 else [
        data[i:i + 2].hex() for i in range(0, len(data), 2)]
    sep, prefix = [(" ", ""), (", ", "0x"), (":", ""), (" ", "")][style]
    rows = [words[i:i + width] for i in range(0, len(words), width)]
    return "".join(sep.join(prefix + w for w in row) + "  # bytes\n" for row in rows)


def _xxd(data: bytes, cols: int, group: int) -> str:
    out = []
    for at in range(0, len(data), cols):
        line = data[at:at + cols]
        hexpart = " ".join(line[i:i + group].hex() for i in range(0, len(line), group))
        width = cols * 2 + cols // group - 1
        out.append(f"{at:08x}: {hexpart:<{width}}  {_text_column(line)}\n")
    return "".join(out)


def _hexdump_c(data: bytes) -> str:
    out, previous, starred = [], b"", False
    for at in range(0, len(data), 16):
        line = data[at:at + 16]
        if line == previous:
            out += [] if starred else ["*\n"]
            starred = True
            continue
        previous, starred = line, False
        cells = " ".join(f"{b:02x}" for b in line[:8]) + "  " + " ".join(
            f"{b:02x}" for b in line[8:])
        out.append(f"{at:08x}  {cells:<48}  |{_text_column(line)}|\n")
    return "".join(out) + f"{len(data):08x}\n"


def _table(data: bytes, prefix: str, upper: bool) -> str:
    rule = "        +" + "---------------+" * 4 + "\n"
    out = ["   Byte/     0       |       1       |       2       |       3       |\n", rule]
    for at in range(0, len(data), 4):
        cells = [f"{prefix}{b:02X}" if upper else f"{prefix}{b:02x}" for b in data[at:at + 4]]
        out += [f"{at:>8}|" + "".join(f" {c:<14}|" for c in cells) + "\n", rule]
    return "".join(out) + "    Magic (0) : 0x80 | prose\n"


BLOCKS = st.lists(st.one_of(st.just(bytes(16)), st.binary(min_size=16, max_size=16)), max_size=6)
DUMP_DATA = st.builds(lambda blocks, tail: b"".join(blocks) + tail, BLOCKS, st.binary(max_size=17))


@given(st.binary(max_size=80), st.integers(0, 3), st.integers(1, 20))
def test_plain_hex_round_trip(data: bytes, style: int, width: int) -> None:
    text = _plain(data, style, width)
    assert parse_hex(text) == data
    assert b"".join(c.data for c in parse_packets(text.encode())) == data


@given(DUMP_DATA.filter(bool), st.sampled_from([(16, 2), (16, 1), (8, 4), (32, 2), (6, 3)]))
def test_xxd_round_trip(data: bytes, shape: tuple[int, int]) -> None:
    assert parse_packets(_xxd(data, *shape).encode()) == [Chunk(data, 1, boundary=False)]


@given(DUMP_DATA.filter(bool))
def test_hexdump_c_round_trip(data: bytes) -> None:
    assert parse_packets(_hexdump_c(data).encode()) == [Chunk(data, 1, boundary=False)]


@given(st.lists(st.binary(min_size=1, max_size=60), min_size=1, max_size=4),
       st.sampled_from(["0x", "0X", ""]), st.booleans())
def test_byte_table_round_trip(packets: list[bytes], prefix: str, upper: bool) -> None:
    text = "".join("Prose about 80 53:\n\n" + _table(p, prefix, upper) for p in packets)
    chunks = parse_packets(text.encode())
    assert [c.data for c in chunks] == packets
    assert all(c.boundary for c in chunks)


@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_any_input_gives_chunks_or_hex_text_error(data: bytes) -> None:
    error: HexTextError | None = None
    chunks: list[Chunk] = []
    try:
        chunks = parse_packets(data)
    except HexTextError as exc:
        error = exc
    if error is not None:
        assert error.line >= 1
        assert str(error).startswith(f"line {error.line}: ")
    assert all(c.data for c in chunks)


# -- offset columns: od -Ax -tx1, tshark -x, the reference's worked examples -----------------------

NOOP = bytes.fromhex("805c0000000000000000000000989681") + bytes(8)
OD = """\
000000 80 5c 00 00 00 00 00 00 00 00 00 00 00 98 96 81
000010 00 00 00 00 00 00 00 00
000018
"""
TSHARK = """\
0000  80 5c 00 00 00 00 00 00 00 00 00 00 00 98 96 81   .\\..............
0010  00 00 00 00 00 00 00 00                           ........
"""
REFERENCE = """\
0000  80 5c 00 00 00 00 00 00 00 00 00 00 00 98 96 81   magic 80, op 5c | opaque 08 96
0010  00 00 00 00 00 00 00 00                           CAS 00 00
"""
OD_TEXT = ("000000 80 5c 00 00 00 00 00 00 00 00 00 00 00 98 96 81  >.\\..............<\n"
           "000010 00 00 00 00 00 00 00 00                          >........<\n000018\n")


@pytest.mark.parametrize("text", [OD, TSHARK, REFERENCE, OD_TEXT, TSHARK.replace("  ", "   ", 1)])
def test_offset_column_and_text_column_are_not_bytes(text: str) -> None:
    assert parse_packets(text.encode()) == [Chunk(NOOP, 1, boundary=False)]


def test_od_repeat_star_with_short_offsets() -> None:
    text = ("000000 80 5c 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n"
            "000010 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n*\n000040 01\n000041\n")
    assert _one(text).data == b"\x80\x5c" + bytes(62) + b"\x01"


def test_tshark_frames_separated_by_blank_lines_are_separate_chunks() -> None:
    assert [c.data for c in parse_packets((TSHARK + "\n" + TSHARK).encode())] == [NOOP, NOOP]


@pytest.mark.parametrize(("text", "line", "what"), [
    # od without -Ax prints octal offsets: refused, not read as hex
    ("0000000 80 5c 00 00 00 00 00 00 00 00 00 00 00 98 96 81\n0000020 00 00\n",
     2, "offset 0x20, expected 0x10"),
    # a text column only two spaces away looks like two more bytes: the next offset refuses it
    ("0000  80 5c 00 00  ab\n0004  00 00\n", 2, "offset 0x4, expected 0x5"),
])
def test_offset_column_that_does_not_follow_on_is_refused(text: str, line: int, what: str) -> None:
    with pytest.raises(HexTextError, match=f"^line {line}: {what}"):
        parse_packets(text.encode())


@pytest.mark.parametrize("text", ["8053 00 00", "0000 0000 0000", "0080 53 00 00"])
def test_lines_not_starting_at_offset_zero_stay_plain_hex(text: str) -> None:
    assert _one(text).data == bytes.fromhex(text.replace(" ", ""))


def test_tshark_data_source_titles_separate_dumps() -> None:
    text = "Frame (24 bytes):\n" + TSHARK + "Reassembled TCP (24 bytes):\n" + TSHARK
    assert [(c.data, c.line) for c in parse_packets(text.encode())] == [(NOOP, 2), (NOOP, 5)]


def _od(data: bytes) -> str:
    rows = [f"{at:06x} " + " ".join(f"{b:02x}" for b in data[at:at + 16]) + "\n"
            for at in range(0, len(data), 16)]
    return "".join(rows) + f"{len(data):06x}\n"


def _tshark(data: bytes) -> str:
    return "".join(f"{at:04x}  " + " ".join(f"{b:02x}" for b in data[at:at + 16]).ljust(47) + "   "
                   + _text_column(data[at:at + 16]) + "\n" for at in range(0, len(data), 16))


@given(DUMP_DATA.filter(bool), st.sampled_from([_od, _tshark]))
def test_offset_column_round_trip(data: bytes, dump: Any) -> None:
    assert parse_packets(dump(data).encode()) == [Chunk(data, 1, boundary=False)]
