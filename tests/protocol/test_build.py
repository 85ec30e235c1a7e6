"""The typed builders give the bytes of every golden vector they can express, and what ``encode`` gives."""

from __future__ import annotations

import pytest
from vectorfile import Vector, all_vectors

from dcpctl.protocol import build
from dcpctl.protocol.constants import MAGIC_CLASS, Magic, Opcode, Status
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.protocol.registry import DIALECTS

# What the builders make: client and server requests and responses of the DCP dialect, without diagnostics (a vector
# that breaks the spec is re-encoded from its record, byte for byte, by encode; a builder makes valid ones).
BUILT = [v for v in all_vectors() if v.dialect == "dcp" and not v.diagnostics
         and v.data[0] in (Magic.CLIENT_REQUEST, Magic.ALT_CLIENT_REQUEST, Magic.CLIENT_RESPONSE,
                           Magic.ALT_CLIENT_RESPONSE, Magic.SERVER_REQUEST, Magic.SERVER_RESPONSE)]


def _decoded(vector: Vector) -> Message:
    return decode(vector.data, 0, DecodeOptions(dialect=DIALECTS[vector.dialect], collections=vector.collections,
                                                show_secrets=True, lenient=vector.lenient))


@pytest.mark.parametrize("vector", BUILT, ids=lambda v: v.name)
def test_a_vector_is_built_from_its_typed_values(vector: Vector) -> None:
    message = _decoded(vector)
    frames = [build.FrameInfo(info.id, info.data) for info in message.frame_infos]
    fields = dict(message.extras or {})
    if message.magic == Magic.SERVER_REQUEST:
        built = build.server_request(message.opcode, opaque=message.opaque, cas=message.cas,
                                     datatype=message.datatype, key=message.key, value=message.value, **fields)
    elif message.magic == Magic.SERVER_RESPONSE:
        built = build.server_response(message.opcode, status=message.vbucket_or_status, opaque=message.opaque,
                                      cas=message.cas, datatype=message.datatype, key=message.key,
                                      value=message.value)
    elif message.is_response:
        built = build.response(message.opcode, status=message.vbucket_or_status, opaque=message.opaque,
                               cas=message.cas, datatype=message.datatype, key=message.key, value=message.value,
                               frame_infos=frames, **fields)
    else:
        built = build.request(message.opcode, vbucket=message.vbucket_or_status, opaque=message.opaque,
                              cas=message.cas, datatype=message.datatype, key=message.key, value=message.value,
                              frame_infos=frames, **fields)
    assert built.hex() == vector.data.hex()


def test_every_vector_family_is_covered() -> None:
    assert len(BUILT) >= 20
    assert {MAGIC_CLASS[v.data[0]] for v in BUILT} == {Magic.CLIENT_REQUEST, Magic.CLIENT_RESPONSE,
                                                      Magic.SERVER_REQUEST, Magic.SERVER_RESPONSE}


def test_grammar_values_and_stream_ids_are_built_as_encode_builds_them() -> None:
    cases = [
        (build.request(Opcode.DCP_SNAPSHOT_MARKER, vbucket=3, opaque=9, stream_id=4, snap_start_seqno=1,
                       snap_end_seqno=5, snapshot_flags=6),
         {"magic": "AltClientRequest", "opcode": "DCP_SNAPSHOT_MARKER", "vbucket": 3, "opaque": 9,
          "frame_infos": [{"id": 2, "data": "0004"}], "snap_start_seqno": 1, "snap_end_seqno": 5,
          "snapshot_flags": 6}),
        (build.response(Opcode.DCP_STREAM_REQ, status=Status.ROLLBACK, opaque=2, rollback_seqno=7),
         {"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Rollback", "opaque": 2,
          "rollback_seqno": 7}),
        (build.response(Opcode.DCP_STREAM_REQ, opaque=2, failover_log=[(5, 0), (6, 10)]),
         {"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Success", "opaque": 2,
          "failover_log": [{"vbucket_uuid": 5, "seqno": 0}, {"vbucket_uuid": 6, "seqno": 10}]}),
        (build.response(Opcode.HELLO, opaque=2, features=[0x07, 0x12]),
         {"magic": "ClientResponse", "opcode": "HELLO", "status": "Success", "opaque": 2,
          "features": ["Xerror", "Collections"]}),
        (build.response(Opcode.OBSERVE_SEQNO, observed_vbucket=1, vbucket_uuid=2, last_persisted_seqno=3,
                        current_seqno=4, old_vbucket_uuid=5, last_received_seqno=6),
         {"magic": "ClientResponse", "opcode": "OBSERVE_SEQNO", "status": "Success", "format_type": 1,
          "observed_vbucket": 1, "vbucket_uuid": 2, "last_persisted_seqno": 3, "current_seqno": 4,
          "old_vbucket_uuid": 5, "last_received_seqno": 6}),
        (build.request(Opcode.DCP_MUTATION, vbucket=1, cas=3, datatype=1, key=b"k", value=b"{}", collection_id=8,
                       by_seqno=1, rev_seqno=1, flags=0, expiration=0, lock_time=0, nmeta=0, nru=0),
         {"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 1, "cas": 3, "datatype": 1, "key": "k",
          "collection_id": 8, "value": "{}", "by_seqno": 1, "rev_seqno": 1, "flags": 0, "expiration": 0,
          "lock_time": 0, "nmeta": 0, "nru": 0}),
        (build.response(0x42, status=Status.UNKNOWN_COMMAND, opaque=1),
         {"magic": "ClientResponse", "opcode": 0x42, "status": "UnknownCommand", "opaque": 1}),
    ]
    for built, record in cases:
        assert built.hex() == encode(record, fix_lengths=True).hex(), record


def test_fields_no_row_declares_are_refused() -> None:
    with pytest.raises(ValueError, match="no DCP_MUTATION row declares exactly by_seqno"):
        build.request(Opcode.DCP_MUTATION, by_seqno=1)
    with pytest.raises(ValueError, match="has no declared fields"):
        build.request(0x42, by_seqno=1)
    with pytest.raises(ValueError, match="DCP_BUFFER_ACKNOWLEDGEMENT"):
        build.request(Opcode.DCP_BUFFER_ACKNOWLEDGEMENT, bytes_to_ack=1 << 32)
    with pytest.raises(ValueError, match="document key"):
        build.request(Opcode.DCP_CONTROL, key=b"k", value=b"v", collection_id=8)
