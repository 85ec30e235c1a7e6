"""A GRAMMAR value's byte count comes from its declaration's sizes where it has them, not from building the
parsed value back, and a list of integer items is read by a struct derived from the item's declaration: held
to construct's build and parse for every declared value grammar that has a size."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import grammar_values

from dcpctl.protocol import walk
from dcpctl.protocol.grammar import failover_log_value
from dcpctl.protocol.message import _consumed, _grammar, grammar_sizes
from dcpctl.protocol.registry import all_variants


def _declared() -> list[tuple[str, Any]]:
    found: dict[int, tuple[str, Any]] = {}
    for dialect, spec, variant in all_variants():
        for grammar in variant.grammars:
            found.setdefault(id(grammar), (f"{dialect.name}:{spec.name}:{variant.name}", grammar))
    return list(found.values())


SIZED = [(name, grammar) for name, grammar in _declared() if grammar_sizes(grammar)[:2] != (None, None)]


def test_the_failover_log_is_counted_by_its_items() -> None:
    assert grammar_sizes(failover_log_value) == (None, 16, "failover_log")
    assert any(grammar is failover_log_value for _, grammar in SIZED)


def test_lists_of_integers_have_a_derived_reader() -> None:
    read = {name.split(":")[1] for name, grammar in SIZED if _grammar(grammar)[4] is not None}
    assert {"DCP_STREAM_REQ", "HELLO", "GET_ALL_VB_SEQNOS", "UPR_RESPONSE"} <= read, sorted(read)


@pytest.mark.parametrize(("name", "grammar"), SIZED, ids=[name for name, _ in SIZED])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_consumed_is_what_construct_builds(name: str, grammar: Any, data: st.DataObject) -> None:
    size, item, _ = grammar_sizes(grammar)
    try:
        value = grammar.build(data.draw(grammar_values(grammar)))
    except Exception:  # noqa: BLE001 - bytes fields come as hex from the strategy: any bytes of the size parse
        length = size if size is not None else item * data.draw(st.integers(0, 6))  # type: ignore[operator]
        value = data.draw(st.binary(min_size=length, max_size=length))
    parsed = grammar.parse(value)
    assert _consumed(grammar, parsed) == len(grammar.build(parsed)) == len(value), name
    read_list = _grammar(grammar)[4]
    if read_list is not None:
        mine = read_list(value)
        assert mine == parsed, name
        assert walk.to_json(grammar, mine) == walk.to_json(grammar, parsed), name
