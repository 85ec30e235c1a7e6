"""JSON is rendering: ``protocol/``, ``dcp/``, ``sources/`` and ``client/`` read, check and return values (a
message, a plain item's reading, its capture context); turning them into JSON text (``orjson.dumps``,
``json.dumps``, the JSON lines' per-shape templates) is ``render/``'s, chosen by the command."""

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
    r"|\b(?:item_line_template|plain_line|plain_value|ItemLines|LineReaders?|PlainLines|plain_item_lines)\b")


# Where JSON is a format of its own, not output: the stream request's value a client sends (wire format, the
# inverse of its parser) and the --state file.
OWN_FORMATS: Final = {"dcpctl/protocol/stream_request_value.py": "a stream request's JSON value",
                      "dcpctl/client/state.py": "the --state file"}
# A name quoted in a docstring (``render.lines.PlainLines``) says where the formatting went; it is not formatting.
QUOTED = re.compile(r"``[^`]*``")


def _findings(area: str) -> list[str]:
    found = []
    for path in sorted((PACKAGE / area).rglob("*.py")):
        if path.relative_to(PACKAGE.parent).as_posix() in OWN_FORMATS:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if JSON_FORMATTING.search(QUOTED.sub("", line)):
                found.append(f"{path.relative_to(PACKAGE.parent).as_posix()}:{number}: {line.strip()}")
    return found


@pytest.mark.parametrize("area", ["protocol", "dcp", "sources", "client"])
def test_no_json_formatting_below_render(area: str) -> None:
    found = _findings(area)
    assert not found, (f"JSON formatting in dcpctl/{area} (it belongs in dcpctl/render, chosen by the command):\n"
                       + "\n".join(found))


@pytest.mark.parametrize("line", ["return orjson.dumps(record)", "json.dumps(value, separators=(',', ':'))",
                                  "from orjson import dumps, loads", "option=orjson.OPT_APPEND_NEWLINE",
                                  "lines = ItemLines(first)", "template = item_line_template(first, plan)"])
def test_the_pattern_catches_what_it_is_for(line: str) -> None:
    assert JSON_FORMATTING.search(line)


@pytest.mark.parametrize("line", ["_json_check = orjson.loads", "return _dumps(lines, _xxd_bytes)",
                                  "value = orjson.loads(data)"])
def test_the_pattern_lets_reading_be(line: str) -> None:
    assert not JSON_FORMATTING.search(line)
