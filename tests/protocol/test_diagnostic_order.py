"""A message's diagnostics are all found by decode() before it returns, and come in one fixed order, whoever
asks for them first: header, frame infos, extras, key, value, then the context annotate() added."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from vectorfile import Vector, all_vectors

from dcpctl.protocol.diagnostic import Diagnostic, diagnostic
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.protocol.registry import DIALECTS
from dcpctl.render.record import record as record_of

VECTORS = all_vectors()
CONTEXT = diagnostic("seqno_backwards", "vbucket 0: seqno 1 after 2")


def _decoded(vector: Vector) -> Message:
    options = DecodeOptions(dialect=DIALECTS[vector.dialect], collections=vector.collections,
                            show_secrets=True, lenient=vector.lenient)
    return decode(vector.data, 0, options)


def _annotate(msg: Message) -> None:
    msg.annotate({"ts": 1.0, "connection": "a:1->b:2"}, {"stream_vbucket": 0}, [CONTEXT])


def _record_first(msg: Message) -> None:
    record_of(msg)
    _annotate(msg)


def _annotate_first(msg: Message) -> None:
    _annotate(msg)


def _diagnostics_first(msg: Message) -> None:
    assert msg.diagnostics is not None
    _annotate(msg)


def _annotate_then_diagnostics(msg: Message) -> None:
    _annotate(msg)
    assert msg.diagnostics is not None


ORDERS: list[Callable[[Message], None]] = [_record_first, _annotate_first, _diagnostics_first,
                                           _annotate_then_diagnostics]


def _value_diagnostics(msg: Message, diagnostics: list[Diagnostic] | tuple[()]) -> list[Diagnostic]:
    """The diagnostics the key and value checks give (those placed in the key or value)."""
    return [d for d in diagnostics if d is not CONTEXT and d.offset is not None and d.offset >= msg.key_offset
            and not d.name.startswith(("must_have", "must_not_have"))]


@pytest.mark.parametrize("vector", VECTORS, ids=repr)
def test_same_diagnostics_whoever_asks_first(vector: Vector) -> None:
    seen = []
    for order in ORDERS:
        msg = _decoded(vector)
        order(msg)
        record = record_of(msg)
        listed = list(msg.diagnostics)
        assert [d.to_json() for d in listed] == record["diagnostics"], order.__name__
        assert listed[-1] is CONTEXT, f"{order.__name__}: the context comes last"
        seen.append((order.__name__, record["diagnostics"]))
    first = seen[0][1]
    for name, diagnostics in seen[1:]:
        assert diagnostics == first, f"{name} gives another order than {seen[0][0]}"


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
