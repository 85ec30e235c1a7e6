"""Typed reading of a decoded message: statuses as Status members, a GRAMMAR value as its declaration parses
it, a stream request's JSON value as the server reads it; none of them builds the JSON record."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dcpctl.protocol import stream_request_value as srv
from dcpctl.protocol.constants import HelloFeature, Status
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.protocol.registry import DCP
from dcpctl.render.record import record as record_of


def _decoded(record: dict[str, Any], options: DecodeOptions = DecodeOptions()) -> Message:  # noqa: B008
    return decode(encode({"magic": "ClientRequest", **record}, DCP, fix_lengths=True), 0, options)


def _response(opcode: str, status: str = "Success", **fields: Any) -> Message:
    return _decoded({"magic": "ClientResponse", "opcode": opcode, "status": status, "opaque": 7, **fields})


def _stream_request(value: str) -> Message:
    return _decoded({"opcode": "DCP_STREAM_REQ", "vbucket": 3, "opaque": 9, "flags": 0, "reserved": 0,
                     "start_seqno": 10, "end_seqno": 20, "vbucket_uuid": 5, "snap_start_seqno": 10,
                     "snap_end_seqno": 10, "value": value}, DecodeOptions(collections=True))


def test_status_is_compared_with_status_members() -> None:
    msg = _response("DCP_STREAM_REQ", "Rollback", rollback_seqno=42)
    assert msg.status == Status.ROLLBACK
    assert msg.status_name == "Rollback"
    assert _decoded({"opcode": "DCP_NOOP", "opaque": 1}).status_name is None


def test_failover_log_entries_as_the_grammar_names_them() -> None:
    msg = _response("DCP_STREAM_REQ", failover_log=[{"vbucket_uuid": 7, "seqno": 30}, {"vbucket_uuid": 5, "seqno": 0}])
    log = msg.field("failover_log")
    assert [(e.vbucket_uuid, e.seqno) for e in log] == [(7, 30), (5, 0)]
    assert msg.value_fields.failover_log is log
    assert record_of(msg)["failover_log"] == [{"vbucket_uuid": 7, "seqno": 30}, {"vbucket_uuid": 5, "seqno": 0}]


def test_empty_failover_log_is_an_empty_list() -> None:
    assert list(_response("GET_FAILOVER_LOG").field("failover_log")) == []


def test_vbucket_seqnos_hello_features_and_error_map_version() -> None:
    seqnos = _response("GET_ALL_VB_SEQNOS", vbucket_seqnos=[{"vbucket": 0, "seqno": 9}, {"vbucket": 3, "seqno": 4}])
    assert {e.vbucket: e.seqno for e in seqnos.field("vbucket_seqnos")} == {0: 9, 3: 4}
    hello = _response("HELLO", features=["Xerror", "Collections"])
    assert hello.hello_features == [HelloFeature.XERROR, HelloFeature.COLLECTIONS]
    errors = _decoded({"opcode": "GET_ERROR_MAP", "opaque": 1, "error_map_version": 2})
    assert errors.field("error_map_version") == 2


def test_a_rollback_seqno_wherever_the_variant_puts_it() -> None:
    assert _response("DCP_STREAM_REQ", "Rollback", rollback_seqno=42).field("rollback_seqno") == 42
    in_extras = _response("DCP_STREAM_REQ", "Rollback", extras_length=8, rollback_seqno=43)
    assert in_extras.field("rollback_seqno") == 43


def test_a_value_that_does_not_fit_has_no_fields() -> None:
    msg = _decoded({"magic": "ClientResponse", "opcode": "GET_ALL_VB_SEQNOS", "status": "Success", "opaque": 1,
                    "value": "0001", "value_encoding": "hex"})
    assert msg.value_fields is None
    assert msg.field("vbucket_seqnos") is None
    assert [d.name for d in msg.diagnostics] == ["illegal_value_length"]


def test_stream_request_value_as_the_server_reads_it() -> None:
    value = _stream_request('{"sid":4,"collections":["8","a"],"purge_seqno":"12"}').stream_request_value
    assert value is not None
    assert (value.sid, value.collections, value.scope, value.purge_seqno) == (4, (8, 10), None, 12)
    # fields the server refuses are not read as numbers: a sid above u16, a string sid, a number purge_seqno
    bad = _stream_request('{"sid":70000,"scope":"0x8","purge_seqno":5}').stream_request_value
    assert bad is not None
    assert (bad.sid, bad.scope, bad.purge_seqno) == (None, None, None)
    assert _stream_request('{"x":"\\"sid\\":5"}').stream_request_value.sid is None  # type: ignore[union-attr]
    assert _stream_request("[1]").stream_request_value is None


@given(sid=st.none() | st.integers(1, 0xFFFF), collections=st.lists(st.integers(0, 0xFFFFFFFF), max_size=4),
       scope=st.none() | st.integers(0, 0xFFFFFFFF))
def test_the_value_a_client_sends_reads_back_as_the_server_reads_it(sid: int | None, collections: list[int],
                                                                     scope: int | None) -> None:
    value = srv.encode(sid, tuple(collections), scope)
    parsed = srv.parse(value)
    if sid is None and not collections and scope is None:
        assert value == b""
        return
    assert parsed is not None
    assert parsed.sid == sid
    assert parsed.collections == (tuple(collections) if collections else None)
    assert parsed.scope == (None if collections else scope)
    assert not srv.validate(value)[1]  # no diagnostics: the server takes it as it is


def test_a_bad_stream_request_value_is_quoted_as_json_wrote_it() -> None:
    """true, not Python's True; and a collection id too wide is said to be too wide, not not hex."""
    messages = {diagnostic.name: diagnostic.message
                for value in (b'{"sid":true}', b'{"collections":["100000000"]}', b'{"uid":"0x1"}')
                for diagnostic in srv.validate(value)[1]}
    assert messages["stream_request_sid_invalid"].startswith("sid true is not an integer")
    assert "at most 8 digits (32-bit ids)" in messages["stream_request_bad_collection_id"]
    assert messages["stream_request_bad_uid"].startswith("uid '0x1' is not a hex string of at most 8 digits")
