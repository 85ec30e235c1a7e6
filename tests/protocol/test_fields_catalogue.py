"""``dcpctl fields`` held to what the decoder prints and to the declarations it is derived from: every key
path of the JSON of every golden vector and of the samples is listed, and a field declared with several
widths is listed with each of them."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vectorfile import all_vectors

from dcpctl.cli import main
from dcpctl.protocol import walk
from dcpctl.protocol.fields import catalogue
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.protocol.registry import DIALECTS, all_variants
from dcpctl.render.env import Environment
from dcpctl.render.record import record as record_of

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _paths(obj: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Key paths as the catalogue names them: ``frame_infos[].id`` for a key of an object in a list."""
    for key, value in obj.items():
        path = f"{prefix}{key}"
        yield path
        if isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    yield from _paths(item, f"{path}[].")
        elif isinstance(value, dict):
            yield from _paths(value, f"{path}.")


def _run(args: list[str]) -> list[dict[str, Any]]:
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=160)
    assert main(args, env) == 0, args
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _listed() -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in _run(["fields", "-F", "jsonl"])}


def test_every_key_path_of_the_vectors_output_is_listed() -> None:
    listed = _listed()
    missing: dict[str, str] = {}
    for vector in all_vectors():
        options = DecodeOptions(dialect=DIALECTS[vector.dialect], collections=vector.collections,
                                show_secrets=True, lenient=vector.lenient)
        for path in _paths(record_of(decode(vector.data, 0, options))):
            if path not in listed:
                missing.setdefault(path, repr(vector))
    assert not missing, missing


@pytest.mark.parametrize("args", [["hexdump", "-F", "jsonl", str(SAMPLES / "dcp-session.bin")],
                                  ["decode", "-F", "jsonl", str(SAMPLES / "dcp-session.pcap")]], ids=["bin", "pcap"])
def test_every_key_path_of_the_samples_output_is_listed(args: list[str]) -> None:
    listed = _listed()
    seen = {path for record in _run(args) for path in _paths(record)}
    if args[0] == "hexdump":
        assert "xattrs[].key" in seen  # the sample has documents with xattrs
    assert sorted(seen - listed.keys()) == []


def test_a_field_declared_with_several_widths_lists_them_all() -> None:
    listed = {f.name: f for f in catalogue()}
    for dialect, spec, variant in all_variants():
        grammars = [variant.layout.grammar] if variant.layout is not None else []
        for grammar in grammars + variant.grammars:
            for name, kind in walk.field_names(grammar):
                if listed[name].messages:  # a common field (the header's) is typed by the header
                    assert kind in listed[name].type.split("|"), (dialect.name, spec.name, variant.name, name)
    assert listed["seqno"].type == "u32|u64"
    assert listed["deleted"].type == "u8|u32"
    assert "u8 in DCP_PREPARE/prepare" in listed["deleted"].meaning


def test_every_listed_field_has_a_meaning() -> None:
    assert [f.name for f in catalogue() if not f.meaning] == []
