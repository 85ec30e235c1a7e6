"""A message's diagnostics are all found by decode() before it returns, and come in one fixed order, whoever
asks for them first: header, frame infos, extras, key, value; an observed packet's context adds its own after
them, and leaves the packet as decode made it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from vectorfile import Vector, all_vectors

from dcpctl.dcp.observed import Observed
from dcpctl.protocol.diagnostic import Diagnostic, diagnostic
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.protocol.registry import DIALECTS
from dcpctl.render import hexdump, pretty
from dcpctl.render.output import MAX_FIELD_BYTES
from dcpctl.render.record import record as record_of

VECTORS = all_vectors()
CONTEXT = diagnostic("seqno_backwards", "vbucket 0: seqno 1 after 2")


def _decoded(vector: Vector) -> Message:
    options = DecodeOptions(dialect=DIALECTS[vector.dialect], collections=vector.collections,
                            show_secrets=True, lenient=vector.lenient)
    return decode(vector.data, 0, options)


def _observed(msg: Message) -> Observed:
    return Observed(msg, {"ts": 1.0, "connection": "a:1->b:2"}, {"stream_vbucket": 0}, [CONTEXT])


def _packet_record_first(msg: Message) -> Observed:
    record_of(msg)
    return _observed(msg)


def _observed_first(msg: Message) -> Observed:
    return _observed(msg)


def _diagnostics_first(msg: Message) -> Observed:
    assert msg.diagnostics is not None
    return _observed(msg)


def _observed_then_diagnostics(msg: Message) -> Observed:
    observed = _observed(msg)
    assert observed.diagnostics is not None
    return observed


ORDERS: list[Callable[[Message], Observed]] = [_packet_record_first, _observed_first, _diagnostics_first,
                                               _observed_then_diagnostics]


def _value_diagnostics(msg: Message, diagnostics: list[Diagnostic] | tuple[()]) -> list[Diagnostic]:
    """The diagnostics the key and value checks give (those placed in the key or value)."""
    return [d for d in diagnostics if d is not CONTEXT and d.offset is not None and d.offset >= msg.key_offset
            and not d.name.startswith(("must_have", "must_not_have"))]


@pytest.mark.parametrize("vector", VECTORS, ids=repr)
def test_same_diagnostics_whoever_asks_first(vector: Vector) -> None:
    seen = []
    for order in ORDERS:
        msg = _decoded(vector)
        observed = order(msg)
        record = record_of(observed)
        listed = list(observed.diagnostics)
        assert [d.to_json() for d in listed] == record["diagnostics"], order.__name__
        assert listed[-1] is CONTEXT, f"{order.__name__}: the context comes last"
        assert listed[:-1] == list(msg.diagnostics), f"{order.__name__}: the packet's own come first"
        seen.append((order.__name__, record["diagnostics"]))
    first = seen[0][1]
    for name, diagnostics in seen[1:]:
        assert diagnostics == first, f"{name} gives another order than {seen[0][0]}"


# What a view may keep once first asked (built from what decode read; never a new reading or diagnostic)
VIEW_CACHES = frozenset({"_extras", "_value_fields", "_plain_document", "_document_text", "_text_found"})


@pytest.mark.parametrize("vector", VECTORS, ids=repr)
def test_observing_and_rendering_a_packet_leave_it_as_decode_made_it(vector: Vector) -> None:
    msg = _decoded(vector)
    made = _slots(msg)
    observed = _observed(msg)
    assert record_of(observed) is record_of(observed)  # built once
    record_of(msg)
    hexdump.render(observed, MAX_FIELD_BYTES)
    pretty.render(msg, record_of(observed), MAX_FIELD_BYTES)
    assert CONTEXT not in msg.diagnostics
    assert "stream_vbucket" not in record_of(msg)
    assert record_of(msg) == record_of(_decoded(vector))
    after = _slots(msg)
    changed = {name for name in after if after[name] is not made[name]}
    assert changed <= VIEW_CACHES, changed


def _slots(msg: Message) -> dict[str, object]:
    """Every slot of the message, each set (a reader that left one unset fails here)."""
    assert not hasattr(msg, "__dict__")  # nothing can be added beside the declared slots
    return {name: getattr(msg, name) for name in Message.__slots__}


def test_vectors_with_value_diagnostics_are_covered() -> None:
    with_value = [v for v in VECTORS if _value_diagnostics(msg := _decoded(v), msg.diagnostics)]
    assert len(with_value) >= 3, [v.name for v in with_value]


def _no_second_pass(msg: Message) -> None:
    raise AssertionError("a check ran after decode() returned")


@pytest.mark.parametrize("vector", VECTORS, ids=repr)
def test_decode_runs_every_check_before_it_returns(vector: Vector, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = record_of(_decoded(vector))
    msg = _decoded(vector)
    monkeypatch.setattr(Message, "_check", _no_second_pass)
    views = (msg.collection_id, msg.document_key, msg.value_reading, msg.document, msg.document_text,
             msg.inflated, msg.xattrs, msg.path_length, msg.grammar_reading, msg.plain_document)
    assert views is not None
    assert [d.to_json() for d in msg.diagnostics] == expected["diagnostics"]
    assert record_of(msg) == expected
