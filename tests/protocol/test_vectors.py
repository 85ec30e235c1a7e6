"""Golden vectors both ways: decode equals the expected fields, encode gives the bytes back."""

from __future__ import annotations

from typing import Any

import pytest
from vectorfile import Vector, all_vectors

from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.protocol.registry import DIALECTS
from dcpctl.render.record import record as record_of

VECTORS = all_vectors()


def _options(vector: Vector) -> DecodeOptions:
    return DecodeOptions(dialect=DIALECTS[vector.dialect], collections=vector.collections,
                         show_secrets=True, lenient=vector.lenient)


def _subset(expected: Any, got: Any, path: str) -> list[str]:
    if isinstance(expected, dict) and isinstance(got, dict):
        return [m for k, v in expected.items() for m in
                (_subset(v, got[k], f"{path}.{k}") if k in got else [f"{path}.{k} missing"])]
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        return [m for i, (e, g) in enumerate(zip(expected, got, strict=True))
                for m in _subset(e, g, f"{path}[{i}]")]
    return [] if expected == got else [f"{path}: expected {expected!r}, got {got!r}"]


def test_vectors_exist() -> None:
    assert len(VECTORS) >= 2
    names = [(v.path, v.name) for v in VECTORS]
    assert len(names) == len(set(names)), "duplicate vector names"


@pytest.mark.parametrize("vector", VECTORS, ids=repr)
def test_decode(vector: Vector) -> None:
    record = record_of(decode(vector.data, 0, _options(vector)))
    problems = _subset(vector.expect, record, "record")
    assert not problems, "\n".join(problems)
    got = sorted({d["name"] for d in record["diagnostics"]})
    assert got == sorted(set(vector.diagnostics)), record["diagnostics"]
    if vector.diagnostics and not vector.errata:
        assert "malformed" in vector.name or "bad" in vector.name, "a diagnosed vector needs errata"


@pytest.mark.parametrize("vector", VECTORS, ids=repr)
def test_encode_gives_the_bytes_back(vector: Vector) -> None:
    record = record_of(decode(vector.data, 0, _options(vector)))
    assert encode(record, DIALECTS[vector.dialect]).hex() == vector.data.hex()
