"""--summary's counts: an exchange in one row, a connection's control traffic in one row, and a status
counted as an error only where it is one (records as decode gives them, through the pure Summary)."""

from __future__ import annotations

from typing import Any

import pytest

from dcpctl.dcp.summary import Summary

CONN = "127.0.0.1:50123 > 127.0.0.1:11210"


def request(opcode: str, offset: int, vbucket: int = 0, **fields: Any) -> dict[str, Any]:
    return {"connection": CONN, "direction": "client>server", "offset": offset, "opcode": opcode,
            "vbucket": vbucket, "diagnostics": [], **fields}


def response(opcode: str, offset: int, asked: int, status: str, **fields: Any) -> dict[str, Any]:
    return {"connection": CONN, "direction": "server>client", "offset": offset, "opcode": opcode,
            "status": status, "request_offset": asked, "diagnostics": [], **fields}


def rows(records: list[dict[str, Any]]) -> dict[int | None, tuple[int, int]]:
    """vbucket -> (messages, errors)."""
    summary = Summary()
    for record in records:
        summary.add(record, 24)
    return {row.vbucket: (row.messages, row.errors) for row in summary.sorted_rows()}


def test_a_connections_control_traffic_is_one_row() -> None:
    """HELLO's request says vbucket 0 and its response none: they were two rows, '0' and '-'."""
    got = rows([request("HELLO", 0), response("HELLO", 0, 0, "Success"),
                request("DCP_OPEN", 40), response("DCP_OPEN", 24, 40, "Success"),
                request("DCP_STREAM_REQ", 80, vbucket=12), response("DCP_STREAM_REQ", 48, 80, "Success",
                                                                    stream_vbucket=12)])
    assert got == {None: (4, 0), 12: (2, 0)}


def test_a_scram_exchange_is_not_an_error() -> None:
    """Every SCRAM connection's first SASL_AUTH is answered AuthContinue: it was counted as an error."""
    got = rows([request("SASL_AUTH", 0), response("SASL_AUTH", 0, 0, "AuthContinue"),
                request("SASL_STEP", 60), response("SASL_STEP", 24, 60, "Success")])
    assert got == {None: (4, 0)}


def test_a_failed_authentication_and_an_already_open_stream_are_errors() -> None:
    got = rows([request("SASL_AUTH", 0), response("SASL_AUTH", 0, 0, "AuthError"),
                request("DCP_STREAM_REQ", 60, vbucket=3), response("DCP_STREAM_REQ", 24, 60, "KeyEexists")])
    assert got == {None: (2, 1), 3: (2, 1)}


def test_offsets_count_per_direction() -> None:
    """The server's noop at offset 0 of its direction and the client's HELLO at offset 0 of its own: each
    response goes with its own request."""
    noop = {**request("DCP_NOOP", 0), "direction": "server>client"}
    answer = {**response("DCP_NOOP", 0, 0, "Success"), "direction": "client>server"}
    got = rows([request("DCP_STREAM_REQ", 0, vbucket=5), noop, answer,
                response("DCP_STREAM_REQ", 24, 0, "Success", stream_vbucket=5)])
    assert got == {None: (2, 0), 5: (2, 0)}


def test_a_document_not_found_is_the_applications_business() -> None:
    got = rows([request("GET", 0, vbucket=7, key="k"), response("GET", 0, 0, "KeyEnoent")])
    assert got == {7: (2, 0)}


def test_vbucket_0s_stream_is_vbucket_0s_row_and_an_item_of_an_unseen_stream_its_vbuckets() -> None:
    """Only the vbucket field says which vbucket a stream request is for, 0 included; an item whose stream
    request came before the capture began still counts in its vbucket's row."""
    item = {**request("DCP_MUTATION", 200, vbucket=9, by_seqno=5), "direction": "server>client"}
    got = rows([request("DCP_STREAM_REQ", 0, vbucket=0), response("DCP_STREAM_REQ", 0, 0, "Success"), item])
    assert got == {0: (2, 0), 9: (1, 0)}


@pytest.mark.parametrize(("opcode", "status", "error"), [
    ("SUBDOC_MULTI_LOOKUP", "SubdocSuccessDeleted", 0),  # a success, on a deleted document (access_deleted)
    ("SUBDOC_MULTI_LOOKUP", "SubdocMultiPathFailure", 0),  # a looked-up path absent: the results say which
    ("SUBDOC_MULTI_MUTATION", "SubdocMultiPathFailureDeleted", 0),
    ("SUBDOC_GET", "SubdocPathEnoent", 0),
    ("SUBDOC_DICT_ADD", "SubdocPathEexists", 0),
    ("SUBDOC_GET", "SubdocPathEinval", 1),  # the path does not parse: the request was wrong
    ("SUBDOC_MULTI_MUTATION", "SubdocXattrUnknownMacro", 1),
    ("DCP_STREAM_REQ", "SubdocPathEnoent", 1),  # no document operation: whatever it means, not an outcome
])
def test_a_subdocument_outcome_is_the_applications_not_an_error(opcode: str, status: str, error: int) -> None:
    """A subdocument command answers about the document's content as a GET answers about the document: a
    path absent or present is the application's business (SubdocSuccessDeleted is even a success); a request
    that is wrong is an error. All of them were counted as errors."""
    got = rows([request(opcode, 0, vbucket=4, key="doc"), response(opcode, 0, 0, status)])
    assert got == {4: (2, error)}


def test_the_note_that_dcpctl_hid_secret_bytes_is_no_finding() -> None:
    """Every SCRAM connection showed 2 diagnostics because dcpctl hid its SASL bytes (a note of its own)."""
    hidden = {"name": "redacted", "severity": "note", "message": "secret bytes hidden"}
    found = {"name": "unknown_opcode", "severity": "note", "message": "opcode unknown"}
    summary = Summary()
    summary.add({**request("SASL_AUTH", 0), "diagnostics": [hidden]}, 24)
    summary.add({**request("SASL_STEP", 60), "diagnostics": [hidden, found]}, 24)
    assert summary.total().diagnostics == 1
