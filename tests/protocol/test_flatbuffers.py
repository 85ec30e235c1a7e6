"""Version-2 system events against flatc, an independent FlatBuffers reader and writer (Debian's
flatbuffers-compiler), given a schema written from the reference (vectors/reference/system_events.fbs)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from construct import Construct
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servekit import peer
from strategies import grammar_values

from dcpctl.protocol import build
from dcpctl.protocol import grammar as g
from dcpctl.protocol.constants import Opcode
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.protocol.walk import from_json, to_json
from dcpctl.render.record import record as record_of

SCHEMA = Path(__file__).parents[1] / "vectors" / "reference" / "system_events.fbs"
# table -> (declaration, event id): the tables of the schema and a system event that carries each
TABLES: dict[str, tuple[Construct, int]] = {
    "Collection": (g.collection_v2_value, 0),
    "DroppedCollection": (g.dropped_collection_v2_value, 1),
    "Scope": (g.scope_v2_value, 3),
    "DroppedScope": (g.dropped_scope_v2_value, 4),
}
# dcpctl's field names -> the schema's
SCHEMA_NAMES = {"manifest_uid": "uid", "scope_id": "scopeId", "collection_id": "collectionId",
                "ttl_valid": "ttlValid", "max_ttl": "maxTtl", "name": "name", "history": "history",
                "default_collection_mvs": "defaultCollectionMVS", "metered": "metered", "flush_uid": "flushUid",
                "system_collection": "systemCollection", "system_scope": "systemScope"}


def _flatc(*args: str | Path) -> None:
    subprocess.run([peer("flatc"), *map(str, args)], check=True, capture_output=True, timeout=60)


def _schema_json(values: dict[str, Any]) -> dict[str, Any]:
    return {SCHEMA_NAMES[name]: value for name, value in values.items() if value is not None}


def _batches(table: str) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(grammar_values(TABLES[table][0]), min_size=1, max_size=12)


@pytest.mark.parametrize("table", sorted(TABLES))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_flatc_reads_what_dcpctl_writes(table: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
                                        ) -> None:
    """Every field of a table dcpctl builds, as flatc reads it (defaults included)."""
    declaration = TABLES[table][0]
    batch = data.draw(_batches(table))
    work = tmp_path_factory.mktemp("written")
    files = []
    for number, values in enumerate(batch):
        path = work / f"{number}.bin"
        path.write_bytes(declaration.build(from_json(declaration, values)))
        files.append(path)
    _flatc("--json", "--strict-json", "--defaults-json", "--raw-binary", "--root-type", f"SystemEvents.{table}",
           "-o", work, SCHEMA, "--", *files)
    for number, values in enumerate(batch):
        read = json.loads((work / f"{number}.json").read_text())
        assert read == _schema_json(values), values


@pytest.mark.parametrize("table", sorted(TABLES))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_dcpctl_reads_what_flatc_writes_and_writes_the_same_bytes(table: str, data: st.DataObject,
                                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """A table flatc builds decodes, in a whole system event, to the fields it was given, with no diagnostic;
    dcpctl lays the same fields out byte for byte as flatc does (kv_engine's builder is flatc's)."""
    declaration, event = TABLES[table]
    batch = data.draw(_batches(table))
    work = tmp_path_factory.mktemp("read")
    files = []
    for number, values in enumerate(batch):
        path = work / f"{number}.json"
        path.write_text(json.dumps(_schema_json(values)))
        files.append(path)
    _flatc("-b", "--root-type", f"SystemEvents.{table}", "-o", work, SCHEMA, *files)
    for number, values in enumerate(batch):
        value = (work / f"{number}.bin").read_bytes()
        name = (values.get("name") or "").encode()
        msg = decode(build.request(Opcode.DCP_SYSTEM_EVENT, key=name, value=value, by_seqno=1, event_id=event,
                                   event_version=2), 0, DecodeOptions(collections=True))
        assert not msg.diagnostics
        assert to_json(declaration, msg.value_fields) == {
            field: values[field] if values[field] is not None else None for field in values}
        assert declaration.build(from_json(declaration, values)) == value


@settings(max_examples=300, deadline=None)
@given(table=st.sampled_from(sorted(TABLES)), data=st.data())
def test_a_damaged_table_is_a_diagnostic_never_an_exception(table: str, data: st.DataObject) -> None:
    """Bytes changed anywhere in a valid table, or cut short: decode reports or reads, never raises (offsets
    out of the value, a string longer than the value, a vtable past its end), and what it reads is what gives
    the packet back (a changed table that still reads, but not as its bytes, is reported too)."""
    declaration, event = TABLES[table]
    value = bytearray(declaration.build(from_json(declaration, data.draw(grammar_values(declaration)))))
    for _ in range(data.draw(st.integers(1, 4))):
        value[data.draw(st.integers(0, len(value) - 1))] = data.draw(st.integers(0, 255))
    value = value[:data.draw(st.integers(1, len(value)))]  # (none at all is an event without a value)
    packet = build.request(Opcode.DCP_SYSTEM_EVENT, value=bytes(value), by_seqno=1, event_id=event, event_version=2)
    msg = decode(packet, 0, DecodeOptions(collections=True))
    assert msg.value_fields is not None or [d.name for d in msg.diagnostics] == ["flatbuffers_table_invalid"]
    assert encode(record_of(msg)) == packet
