"""JSON is rendering: ``protocol/``, ``dcp/``, ``sources/`` and ``client/`` read, check and return values (a
message, a plain item's reading, its capture context); turning them into JSON text (``orjson.dumps``,
``json.dumps``, the JSON lines' per-shape templates) or into the JSON contract's object (the record dict,
``render/record.py``) is ``render/``'s, chosen by the command."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dcpctl"

# JSON text made: a dumps call of either library, its newline/indent options, or the lines' templates and
# writers (named as render/lines.py names them).
JSON_FORMATTING = re.compile(
    r"\b(?:orjson|json)\.dumps\b|\bfrom (?:orjson|json) import [^\n]*\bdumps\b|\bOPT_(?:APPEND_NEWLINE|INDENT_2)\b"
    r"|\b(?:item_line_template|line_filler|ItemLines|PlainLines|plain_item_lines)\b")


# The record's dict built: a key stored into a record (``rec["key"] = ...``, ``record.update(...)``), a record
# builder or method (``def _record``, ``def _fast_record``, ``msg.record()``, ``has_record``), a message's
# diagnostics turned into their JSON objects. Reading a record (``encode`` takes one at the JSON boundary) is
# not building it.
RECORD_BUILDING = re.compile(
    r"\b(?:rec|record)\[[^]\n]*\]\s*=[^=]|\b(?:rec|record)\.update\(|\bdef _?(?:fast_)?record\b"
    r"|\.record\(\)|\bhas_record\b|\.to_json\(\) for \w+ in (?:\w+\.)*_?diagnostics\b")


# Where JSON is a format of its own, not output: the stream request's value a client sends (wire format, the
# inverse of its parser) and the --state file.
OWN_FORMATS: Final = {"dcpctl/protocol/stream_request_value.py": "a stream request's JSON value",
                      "dcpctl/client/state.py": "the --state file"}
# A name quoted in a docstring (``render.lines.PlainLines``) says where the formatting went; it is not formatting.
QUOTED = re.compile(r"``[^`]*``")


def _findings(area: str, pattern: re.Pattern[str] = JSON_FORMATTING) -> list[str]:
    found = []
    for path in sorted((PACKAGE / area).rglob("*.py")):
        if pattern is JSON_FORMATTING and path.relative_to(PACKAGE.parent).as_posix() in OWN_FORMATS:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(QUOTED.sub("", line)):
                found.append(f"{path.relative_to(PACKAGE.parent).as_posix()}:{number}: {line.strip()}")
    return found


@pytest.mark.parametrize("area", ["protocol", "dcp", "sources", "client"])
def test_no_json_formatting_below_render(area: str) -> None:
    found = _findings(area)
    assert not found, (f"JSON formatting in dcpctl/{area} (it belongs in dcpctl/render, chosen by the command):\n"
                       + "\n".join(found))


@pytest.mark.parametrize("line", ["return orjson.dumps(record)", "json.dumps(value, separators=(',', ':'))",
                                  "from orjson import dumps, loads", "option=orjson.OPT_APPEND_NEWLINE",
                                  "lines = ItemLines(first)", "template = item_line_template(first, plan)",
                                  "fill = line_filler(first, plan, slots)"])
def test_the_pattern_catches_what_it_is_for(line: str) -> None:
    assert JSON_FORMATTING.search(line)


@pytest.mark.parametrize("line", ["_json_check = orjson.loads", "return _dumps(lines, _xxd_bytes)",
                                  "value = orjson.loads(data)"])
def test_the_pattern_lets_reading_be(line: str) -> None:
    assert not JSON_FORMATTING.search(line)


@pytest.mark.parametrize("area", ["protocol", "dcp", "sources", "client"])
def test_no_record_building_below_render(area: str) -> None:
    found = _findings(area, RECORD_BUILDING)
    assert not found, (f"the JSON record built in dcpctl/{area} (it belongs in dcpctl/render/record.py; read the "
                       "message's typed views instead):\n" + "\n".join(found))


# What message.py had before the record moved to render/ (each line from that version).
@pytest.mark.parametrize("line", ['rec["offset"] = msg.offset', "rec[f\"{name}_encoding\"] = \"hex\"",
                                  'rec["magic"], rec["opcode"] = plan.fast', "rec.update(msg._extras)",
                                  "def _record(msg: Message, rec: dict[str, Any] | None = None)",
                                  "def _fast_record(msg: Message, plan: _Plan, rec: dict[str, Any])",
                                  "def record(self) -> dict[str, Any]:", "return self.read_message().record()",
                                  "def has_record(self) -> bool:",
                                  'merged["diagnostics"] = [d.to_json() for d in diagnostics] if diagnostics else []'])
def test_the_record_pattern_catches_what_it_is_for(line: str) -> None:
    assert RECORD_BUILDING.search(line)


@pytest.mark.parametrize("line", ['magic = _code(MAGICS, rec["magic"], "magic", 8)', 'if rec["value"] == "":',
                                  '"failover_log": [e.to_json() for e in self.failover_log]',
                                  "cache_transfer_record = Struct(", "record_of(msg)",
                                  'return _hex(rec["extras"], "extras")'])
def test_the_record_pattern_lets_reading_be(line: str) -> None:
    assert not RECORD_BUILDING.search(line)

