"""-f templates: a record's fields as JSON has them (strings unquoted), format specs on the values themselves,
one line per message whatever its text, and no way out of the record."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dcpctl.exitcode import ExitCode
from dcpctl.render.template import Template, TemplateError

MUTATION: dict[str, Any] = {
    "ts": 1700000000.00019, "opcode": "DCP_MUTATION", "vbucket": 12, "cas": 0x180A42631510E000, "by_seqno": 201,
    "key": "airline_10", "value": '{"name":"40-Mile Air"}', "diagnostics": [],
}
STREAM_REQ: dict[str, Any] = {
    "opcode": "DCP_STREAM_REQ", "vbucket": 12, "status": "Success",
    "failover_log": [{"vbucket_uuid": 77113958330241, "seqno": 200}, {"vbucket_uuid": 2099, "seqno": 0}],
}


def test_fields_are_written_as_the_json_record_has_them() -> None:
    template = Template("{opcode} {vbucket} {by_seqno} {key} {value} {diagnostics}")
    assert template.line(MUTATION) == 'DCP_MUTATION 12 201 airline_10 {"name":"40-Mile Air"} []'
    listed = Template("{failover_log} {failover_log[0][vbucket_uuid]} {failover_log[1]}").line(STREAM_REQ)
    whole, first_uuid, second = listed.split(" ")
    assert json.loads(whole) == STREAM_REQ["failover_log"]
    assert int(first_uuid) == 77113958330241
    assert json.loads(second) == {"vbucket_uuid": 2099, "seqno": 0}


def test_true_false_and_null_are_json_words() -> None:
    template = Template("{opcode} {diagnostics}")
    record = {"opcode": "X", "diagnostics": [{"name": "n", "fatal": False, "extra": None}]}
    assert template.line(record) == 'X [{"name":"n","fatal":false,"extra":null}]'


def test_a_format_spec_formats_the_value_itself() -> None:
    assert Template("{cas:x} {by_seqno:>6} {key:.7}|{ts:.3f}").line(MUTATION) == \
        "180a42631510e000    201 airline|1700000000.000"
    assert Template("{vbucket:>{by_seqno}}").needed == {"vbucket", "by_seqno"}  # a spec's fields count too


def test_a_value_that_does_not_fit_the_spec_names_the_message() -> None:
    with pytest.raises(TemplateError, match=r"^-f: bad template for DCP_MUTATION: .*'d'") as raised:
        Template("{key:d}").line(MUTATION)
    assert raised.value.code == ExitCode.USAGE


@pytest.mark.parametrize(("text", "escaped"), [
    ("two\nlines", "two\\nlines"),
    ("\x1b]0;title\x07\x1b[2J", "\\x1b]0;title\\x07\\x1b[2J"),
    ("tab\there\r", "tab\\there\\r"),
    ("back\\slash \u202eevil", "back\\\\slash \\u202eevil"),
])
def test_text_that_could_forge_a_line_or_move_the_cursor_is_escaped(text: str, escaped: str) -> None:
    assert Template("{key}!").line({**MUTATION, "key": text}) == escaped + "!"


def test_printable_text_is_written_as_it_is() -> None:
    value = '{"path":"C:\\\\dir","quote":"say \\"hi\\""}'
    assert Template("{value}").line({**MUTATION, "value": value}) == value  # still JSON, backslashes and all


@given(st.text())
def test_any_text_makes_one_line_without_escape_sequences(text: str) -> None:
    line = Template("{key} {value}").line({**MUTATION, "key": text, "value": text})
    assert line.isprintable()


def test_only_records_with_every_named_field_fit() -> None:
    template = Template("{key} {by_seqno}")
    assert template.fits(MUTATION)
    assert not template.fits(STREAM_REQ)
    assert Template("{failover_log[0]}").fits(STREAM_REQ)


@pytest.mark.parametrize("text", [
    "{value[0]}",                              # an empty value (a deletion's)
    "{key[40]}",                               # past the end of the text
    "{failover_log[2]}",                       # past the end of the list
    "{failover_log[0][nope]}",                 # a key the object does not have
    "{failover_log[seqno]}",                   # a list indexed by a name
    "{key[seqno]}",                            # text indexed by a name
    "{vbucket[0]}",                            # a number: not indexable
    "{diagnostics[0]}",                        # an empty list
    "{opcode:>{failover_log[9][seqno]}}",      # inside a format spec too
])
def test_an_index_that_leads_nowhere_does_not_fit(text: str) -> None:
    """A field the message does not have, as a missing one: the message is skipped, not the run stopped."""
    record = {**MUTATION, **STREAM_REQ, "value": ""}
    template = Template(text)
    assert not template.fits(record)
    assert Template(re.sub(r"\[[^\]]*\]", "", text)).fits(record)  # the fields themselves are there


def test_an_index_that_leads_somewhere_fits_and_is_written() -> None:
    template = Template("{key[0]}{key[9]} {failover_log[1][seqno]} {opcode:>{failover_log[0][seqno]}}")
    record = {**MUTATION, **STREAM_REQ}
    assert template.fits(record)
    assert template.line(record) == "a0 0 " + "DCP_STREAM_REQ".rjust(200)


@pytest.mark.parametrize(("text", "why"), [
    ("{0}", "name a field"),
    ("{}", "name a field"),
    ("{key.upper}", "name a field"),
    ("{key.__class__}", "name a field"),
    ("{failover_log[_x]}", "name a field"),
    ("{key:{x.__class__}}", "name a field"),
    ("{by_seqn}", "unknown field 'by_seqn' (did you mean by_seqno?)"),
    ("{value[pad]", "expected '}'"),
    ("{key!z}", "{key!z}: the conversions are !r, !s and !a"),
])
def test_a_template_that_names_no_field_or_reaches_past_the_record_is_refused(text: str, why: str) -> None:
    with pytest.raises(TemplateError) as raised:  # at once, before anything is read or connected
        Template(text)
    assert str(raised.value).startswith("-f: bad template")
    assert why in str(raised.value)
    assert raised.value.code == ExitCode.USAGE


@pytest.mark.parametrize("text", [
    "{opcode} {key}", "{key!r}|{key!a}|{key!s}", "{by_seqno:>8}{cas:#x}", "{vbucket:>{by_seqno}}|",
    "{{literal}} {key:^20} {ts:.2f}", "{value[0]}{value[2]}{key[3]}", "{by_seqno:{vbucket}}",
])
def test_fields_of_text_and_specs_format_as_str_format_does(text: str) -> None:
    """The template is compiled once, not handed to str.format per message: the same text where JSON's
    writing and str's agree (strings, and values with a spec)."""
    assert Template(text).line(MUTATION) == text.format(**MUTATION)


def test_specs_nest_as_deep_as_str_format_lets_them() -> None:
    assert Template("{vbucket:>{by_seqno}}").needed == {"vbucket", "by_seqno"}
    nested = "{vbucket:>{by_seqno:{vbucket}}}"
    with pytest.raises(ValueError, match="recursion"):
        nested.format(**MUTATION)
    with pytest.raises(TemplateError, match="a field in a format spec cannot have fields in its own spec"):
        Template(nested)


@pytest.mark.parametrize(("text", "why"), [
    ("{key:>99999999999}", "{key:>99999999999}: a width of at most 10,000"),
    ("{ts:.99999999f}", "{ts:.99999999f}: a precision of at most 10,000"),
    ("{by_seqno:0=+#10001_d}", "a width of at most 10,000"),
    ("{key:9>{vbucket}}", None),  # a digit as the fill is not a width
])
def test_a_spec_that_asks_for_more_than_a_line_is_refused_at_once(text: str, why: str | None) -> None:
    if why is None:
        assert Template(text).line(MUTATION) == text.format(**MUTATION)
        return
    with pytest.raises(TemplateError, match=re.escape(why)) as raised:
        Template(text)
    assert raised.value.code == ExitCode.USAGE


def test_a_width_a_message_supplies_is_bounded_too() -> None:
    """'{key:>{cas}}' asks the capture for its width: a CAS is no width, and the machine's memory no limit."""
    assert len(Template("{key:>{vbucket}}").line(MUTATION)) == 12
    with pytest.raises(TemplateError, match=r"^-f: bad template for DCP_MUTATION: \{key:>\d+\}: a width of at most"):
        Template("{key:>{cas}}").line(MUTATION)
