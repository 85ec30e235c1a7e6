"""Loader for golden vector files (format in tests/vectors/README.md)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VECTOR_DIR = Path(__file__).parent / "vectors"
_HEX_INT = re.compile(r"^-?0x[0-9a-fA-F]+$")


@dataclass
class Vector:
    name: str
    path: Path
    line: int
    source: str
    data: bytes
    dialect: str = "dcp"
    collections: bool | None = None
    lenient: bool = False
    errata: str = ""
    expect: dict[str, Any] = field(default_factory=dict)
    diagnostics: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"{self.path.name}:{self.name}"


def _value(text: str) -> Any:
    text = text.strip()
    if _HEX_INT.match(text):
        return int(text, 16)
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse(path: Path) -> list[Vector]:
    vectors: list[Vector] = []
    for block, first_line in _blocks(path.read_text()):
        fields: dict[str, str] = {}
        hex_lines: list[str] = []
        expect: dict[str, Any] = {}
        section = None
        for line in block:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if not line[0].isspace():
                name, _, rest = line.partition(":")
                name = name.strip()
                if name in ("bytes", "expect"):
                    section = name
                    if rest.strip():
                        (hex_lines if name == "bytes" else []).append(rest)
                    continue
                section = None
                fields[name] = rest.strip()
            elif section == "bytes":
                hex_lines.append(line.split("#", 1)[0])
            elif section == "expect":
                key, _, rest = line.strip().partition(":")
                expect[key.strip()] = _value(rest)
            else:
                raise ValueError(f"{path}:{first_line}: indented line outside bytes/expect: {line!r}")
        missing = [k for k in ("name", "source") if k not in fields]
        if missing or not hex_lines:
            raise ValueError(f"{path}:{first_line}: vector lacks {missing or ['bytes']}")
        diagnostics = [d.strip() for d in fields.get("diagnostics", "").split(",") if d.strip()]
        if diagnostics and not fields.get("errata") and not fields.get("malformed"):
            pass
        collections = fields.get("collections")
        vectors.append(Vector(
            name=fields["name"], path=path, line=first_line, source=fields["source"],
            data=bytes.fromhex("".join("".join(hex_lines).split())),
            dialect=fields.get("dialect", "dcp"),
            collections=None if collections is None else collections == "true",
            lenient=fields.get("lenient", "false") == "true",
            errata=fields.get("errata", ""), expect=expect, diagnostics=diagnostics))
    return vectors


def _blocks(text: str) -> list[tuple[list[str], int]]:
    blocks: list[tuple[list[str], int]] = []
    current: list[str] = []
    start = 1
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == "---":
            if any(x.strip() and not x.lstrip().startswith("#") for x in current):
                blocks.append((current, start))
            current, start = [], number + 1
            continue
        current.append(line)
    if any(x.strip() and not x.lstrip().startswith("#") for x in current):
        blocks.append((current, start))
    return blocks


def all_vectors() -> list[Vector]:
    return [v for path in sorted(VECTOR_DIR.rglob("*.vec")) for v in parse(path)]
