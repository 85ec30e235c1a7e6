"""``dcpctl serve`` checks a request's shape as kv_engine's validators do, before the command runs: frame infos,
the extras, key and value each command's row declares, datatype bits (reference 2.1, 2.2, 3.1, 4.1, 6.1); and
answers as the reference gives them: the first snapshot marker's start, filtered sync-write streams, ``uid``,
error bodies and disconnects without XERROR, ``@no bucket@``, noop opaques."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from servekit import Server, serving
from wire import Client

from dcpctl.protocol.constants import Datatype, DcpOpenFlag, SnapshotMarkerFlag

ITEMS_PER_VB = 50
NO_BUCKET = "@no bucket@"  # reference 4.3: the name that deselects


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with serving("--vbuckets", "4", "--items", str(4 * ITEMS_PER_VB), "--seed", "11") as running:
        yield running


def authenticated(server: Server, *features: str) -> Client:
    client = Client(server.port)
    assert client.hello("Xerror", *features)["status"] == "Success"
    assert client.plain()["status"] == "Success"
    assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
    return client


def producer(server: Server, *features: str, **controls: str) -> Client:
    client = Client(server.port)
    client.dcp(*features, controls={"enable_noop": "true", **controls})
    return client


def framed(client: Client, framing: str, **record: Any) -> dict[str, Any]:
    """A request with these framing extras (hex, sent as they are: magic AltClientRequest)."""
    return client.call(magic="AltClientRequest", framing_extras=framing, **record)


# --- 1. frame infos (reference 2.1, 2.2) ------------------------------------------------------------------
@pytest.mark.parametrize(("framing", "status"), [
    ("", "Success"),  # no frame infos at all
    ("00", "Success"),  # Barrier, empty
    ("2200 05", "Success"),  # a stream id, 2 bytes (this command does not use it)
    ("01 00", "Einval"),  # Barrier with data
    ("21 05", "Einval"),  # stream id of 1 byte
    ("23 000005", "Einval"),  # stream id of 3 bytes
    ("30", "UnknownFrameInfo"),  # 3: the retired tracing prototype, unknown to the server now
    ("90", "UnknownFrameInfo"),  # 9: never declared
    ("f0 05", "UnknownFrameInfo"),  # 20, through the id escape
    ("22 00", "Einval"),  # a stream id that runs past the framing extras
    ("00 f0", "Einval"),  # an escape byte missing at the end
    ("30 22 00", "UnknownFrameInfo"),  # the first element decides: unknown before the overrun
    ("01 00 30", "Einval"),  # a bad Barrier before an unknown id
    # lengths kv_engine's frame-extras validator refuses (they were all Success)
    ("11 01", "Einval"),  # a durability requirement on a command that takes none
    ("40", "Einval"),  # an impersonated user with no name
    ("60", "Einval"),  # an extra privilege with no name
    ("51 00", "Einval"),  # PreserveTtl with data
    ("71 05", "Einval"),  # a token auth id of 1 byte
])
def test_frame_infos_are_checked_as_the_server_parses_them(server: Server, framing: str, status: str) -> None:
    client = authenticated(server)
    assert framed(client, framing.replace(" ", ""), opcode="GET_FAILOVER_LOG", vbucket=1)["status"] == status
    assert client.call(opcode="GET_FAILOVER_LOG", vbucket=1)["status"] == "Success"  # the connection stays


@pytest.mark.parametrize(("framing", "status"), [("11 01", "Success"), ("13 01 2710", "Success"),
                                                 ("12 01 00", "Einval"), ("14 01 271000", "Einval")])
def test_a_durability_requirement_is_a_level_and_maybe_a_timeout(server: Server, framing: str, status: str) -> None:
    """Reference 2.2: 1 or 3 bytes; kv_engine says 'Invalid sized buffer provided' of any other."""
    client = authenticated(server)
    reply = framed(client, framing.replace(" ", ""), opcode="SET", vbucket=1, key="k", value="v", flags=0,
                   expiration=0)
    assert reply["status"] == status, reply


def test_a_durability_requirement_is_for_the_commands_kv_engine_gives_one(server: Server) -> None:
    """TOUCH takes one; a quiet SETQ does not (kv_engine's opcode table): no answer to it would say how it went."""
    client = authenticated(server)
    assert client.call(opcode="SET", vbucket=1, key="k", value="v", flags=0, expiration=0)["status"] == "Success"
    assert framed(client, "1101", opcode="TOUCH", vbucket=1, key="k", expiration=60)["status"] == "Success"
    assert framed(client, "1101", opcode="SETQ", vbucket=1, key="k", value="v", flags=0,
                  expiration=0)["status"] == "Einval"


def test_frame_infos_are_checked_on_dcp_commands_too(server: Server) -> None:
    client = producer(server)
    assert framed(client, "30", opcode="DCP_CONTROL", key="set_priority", value="high")["status"] == \
        "UnknownFrameInfo"
    assert framed(client, "0105", opcode="DCP_CONTROL", key="set_priority", value="high")["status"] == "Einval"
    assert framed(client, "00", opcode="DCP_CONTROL", key="set_priority", value="high")["status"] == "Success"


# --- 2. the first snapshot marker (reference 3.8) -------------------------------------------------------------
@pytest.mark.parametrize("start", [0, 10])
def test_the_first_marker_starts_at_the_requested_start(server: Server, start: int) -> None:
    client = producer(server)
    uuid = client.call(opcode="GET_FAILOVER_LOG", vbucket=2)["failover_log"][0]["vbucket_uuid"]
    assert client.stream_request(2, start=start, end=ITEMS_PER_VB, uuid=uuid)["status"] == "Success"
    records = client.until("DCP_STREAM_END")
    marker = records[0]
    assert marker["opcode"] == "DCP_SNAPSHOT_MARKER"
    assert (marker["snap_start_seqno"], marker["snap_end_seqno"]) == (start, ITEMS_PER_VB)
    assert marker["snapshot_flags"] == SnapshotMarkerFlag.DISK | SnapshotMarkerFlag.CHECKPOINT
    assert [r["by_seqno"] for r in records if "by_seqno" in r] == list(range(start + 1, ITEMS_PER_VB + 1))


# --- 3. filtered streams and sync writes (reference 3.4.4, 9.3 step 6) ---------------------------------------
def test_a_filtered_stream_on_a_sync_write_connection_is_not_supported(server: Server) -> None:
    client = producer(server, "Collections", enable_sync_writes="true")
    assert client.stream_request(0, value='{"collections":["0"]}')["status"] == "NotSupported"
    assert client.stream_request(0, value='{"scope":"0"}')["status"] == "NotSupported"
    # step 6's earlier checks come first: the value, an unknown collection or scope, the stream id
    assert client.stream_request(0, value='{"collections":["0"],"scope":"0"}')["status"] == "Einval"
    assert client.stream_request(0, value='{"collections":["77"]}')["status"] == "UnknownCollection"
    assert client.stream_request(0, value='{"scope":"77"}')["status"] == "UnknownScope"
    assert client.stream_request(0, value='{"sid":1,"collections":["0"]}')["status"] == "DcpStreamIdInvalid"
    assert client.stream_request(0, value='{"uid":"0"}')["status"] == "Success"  # not filtered
    plain = producer(server, "Collections")
    assert plain.stream_request(0, value='{"collections":["0"]}')["status"] == "Success"


# --- 4. uid of any type (reference 12 item 11) -------------------------------------------------------------------
@pytest.mark.parametrize("value", ['{"uid":5}', '{"uid":"5"}', '{"uid":null}', '{"uid":[1]}'])
def test_the_uid_is_not_type_checked(server: Server, value: str) -> None:
    client = producer(server, "Collections")
    assert client.stream_request(3, value=value)["status"] == "Success"


# --- 5. HELLO (reference 4.1) ---------------------------------------------------------------------------------
def test_hello_with_an_odd_feature_list_or_extras_is_einval(server: Server) -> None:
    client = Client(server.port)
    assert client.call(opcode="HELLO", key="tests", value="000700", value_encoding="hex")["status"] == "Einval"
    assert client.call(opcode="HELLO", key="tests", extras="00000000", value="0007",
                       value_encoding="hex")["status"] == "Einval"
    reply = client.hello("Xerror")
    assert (reply["status"], reply["features"]) == ("Success", ["Xerror"])


# --- 6. packet shapes (reference 3.1, 3.2, 3.5, 3.6, 3.14, 3.15, 6.1) --------------------------------------------
@pytest.mark.parametrize("record", [
    {"opcode": "DCP_CONTROL", "key": "set_priority", "value": "high", "extras": "00000000"},
    {"opcode": "DCP_CONTROL", "key": "", "value": "high"},
    {"opcode": "DCP_CONTROL", "key": "set_priority", "value": ""},
    {"opcode": "DCP_CONTROL", "key": "cache_transfer", "value": ""},
    {"opcode": "DCP_CONTROL", "key": "set_priority", "value": "high", "datatype": Datatype.JSON},
    {"opcode": "DCP_GET_FAILOVER_LOG", "vbucket": 1, "extras": "00000000"},
    {"opcode": "DCP_GET_FAILOVER_LOG", "vbucket": 1, "key": "k"},
    {"opcode": "DCP_GET_FAILOVER_LOG", "vbucket": 1, "value": "v"},
    {"opcode": "GET_FAILOVER_LOG", "vbucket": 1, "extras": "00"},
    {"opcode": "GET_FAILOVER_LOG", "vbucket": 1, "key": "k"},
    {"opcode": "GET_FAILOVER_LOG", "vbucket": 1, "value": "v"},
    {"opcode": "DCP_CLOSE_STREAM", "vbucket": 1, "extras": "00000000"},
    {"opcode": "DCP_CLOSE_STREAM", "vbucket": 1, "key": "k"},
    {"opcode": "DCP_CLOSE_STREAM", "vbucket": 1, "value": "v"},
    {"opcode": "DCP_BUFFER_ACKNOWLEDGEMENT", "vbucket": 1, "bytes_to_ack": 10, "key": "k"},
    {"opcode": "DCP_BUFFER_ACKNOWLEDGEMENT", "vbucket": 1, "bytes_to_ack": 10, "value": "v"},
    {"opcode": "DCP_SEQNO_ACKNOWLEDGED", "vbucket": 1, "extras": "0000"},
    # datatype bits the connection did not negotiate (HELLO had Xerror only; DCP_OPEN added JSON)
    {"opcode": "DCP_GET_FAILOVER_LOG", "vbucket": 1, "datatype": Datatype.SNAPPY},
    {"opcode": "GET_FAILOVER_LOG", "vbucket": 1, "datatype": Datatype.XATTR},
    {"opcode": "DCP_STREAM_REQ", "vbucket": 1, "flags": 0, "reserved": 0, "start_seqno": 0, "end_seqno": 1,
     "vbucket_uuid": 0, "snap_start_seqno": 0, "snap_end_seqno": 0, "datatype": Datatype.SNAPPY},
    {"opcode": "DCP_CLOSE_STREAM", "vbucket": 1, "datatype": int(Datatype.XATTR | Datatype.JSON)},
    {"opcode": "DCP_GET_FAILOVER_LOG", "vbucket": 1, "datatype": 8},  # above the three bits
], ids=lambda record: "-".join([record["opcode"], *(k for k in record if k in ("extras", "key", "value", "datatype"))]))
def test_malformed_dcp_requests_are_einval(server: Server, record: dict[str, Any]) -> None:
    client = producer(server)
    reply = client.call(**record)
    assert reply["status"] == "Einval", reply
    assert client.call(opcode="DCP_GET_FAILOVER_LOG", vbucket=1)["status"] == "Success"


def test_well_formed_requests_still_succeed(server: Server) -> None:
    client = producer(server)
    assert client.call(opcode="DCP_CONTROL", key="set_priority", value="high")["status"] == "Success"
    assert client.call(opcode="DCP_CLOSE_STREAM", vbucket=1)["status"] == "KeyEnoent"  # well formed: no stream


def test_cache_transfer_is_a_probe_serve_answers_as_a_node_without_it(server: Server) -> None:
    """Reference 7.2: the control succeeds iff the node has dcp_cache_transfer_enabled. It said Success, and
    then every stream request with CacheTransfer was Einval: a client was told of a feature it could not use."""
    client = producer(server)
    assert client.call(opcode="DCP_CONTROL", key="cache_transfer", value="true")["status"] == "NotSupported"


def drained(client: Client) -> None:
    """Everything the server sends, until it closes the connection (ConnectionError)."""
    while True:
        client.read()


def test_a_sync_replication_consumers_seqno_acknowledgement_is_taken_without_an_answer(server: Server) -> None:
    """Reference 3.1, 3.17: client to producer, answered on error only; it was NotSupported ('sent by a
    producer'). Without enable_sync_writes and a consumer_name it is an error."""
    client = producer(server, enable_sync_writes="true", consumer_name="replica-1")
    opened = client.call(opcode="DCP_STREAM_REQ", vbucket=1, flags=0, reserved=0, start_seqno=0,
                         end_seqno=2**64 - 1, vbucket_uuid=0, snap_start_seqno=0, snap_end_seqno=0)
    assert opened["status"] == "Success"
    client.send(opcode="DCP_SEQNO_ACKNOWLEDGED", vbucket=1, prepared_seqno=5)
    assert client.call(opcode="DCP_GET_FAILOVER_LOG", vbucket=1)["opcode"] == "DCP_GET_FAILOVER_LOG"  # no answer
    assert not [r for r in client.backlog if r["opcode"] == "DCP_SEQNO_ACKNOWLEDGED"]
    # kv_engine: a vbucket not on the node is NotMyVbucket; one the connection streams nothing of disconnects
    assert client.call(opcode="DCP_SEQNO_ACKNOWLEDGED", vbucket=1000, prepared_seqno=5)["status"] == "NotMyVbucket"
    client.send(opcode="DCP_SEQNO_ACKNOWLEDGED", vbucket=2, prepared_seqno=5)
    with pytest.raises(ConnectionError):
        drained(client)
    plain = producer(server, enable_sync_writes="true")
    assert plain.call(opcode="DCP_SEQNO_ACKNOWLEDGED", vbucket=1, prepared_seqno=5)["status"] == "Einval"


def test_a_server_request_from_a_client_closes_the_connection(server: Server) -> None:
    """Magic 0x82 takes the server's opcode table (reference 4.9): its 0x21 was run as SASL_AUTH and its 0x89
    as SELECT_BUCKET. kv_engine closes the connection ('Received a server command')."""
    client = authenticated(server)
    name = b"default"
    client.sock.sendall(struct.pack(">BBHBBHIIQ", 0x82, 0x89, len(name), 0, 0, 0, len(name), 1, 0) + name)
    with pytest.raises(ConnectionError):
        client.read()


def test_a_dcp_open_with_short_extras_is_einval(server: Server) -> None:
    client = authenticated(server)
    flags = f"{int(DcpOpenFlag.PRODUCER):08x}"
    assert client.call(opcode="DCP_OPEN", key="x", extras=flags)["status"] == "Einval"  # 4 bytes, not 8
    assert client.call(opcode="DCP_OPEN", key="x", extras="")["status"] == "Einval"
    assert client.call(opcode="DCP_OPEN", key="x", seqno=0, flags=DcpOpenFlag.PRODUCER)["status"] == "Success"


def test_a_buffer_ack_with_a_key_is_answered_a_good_one_is_not(server: Server) -> None:
    client = producer(server)
    bad = client.send(opcode="DCP_BUFFER_ACKNOWLEDGEMENT", vbucket=0, bytes_to_ack=1, key="k")
    client.send(opcode="DCP_BUFFER_ACKNOWLEDGEMENT", vbucket=0, bytes_to_ack=1)  # no answer on success
    reply = client.call(opcode="DCP_GET_FAILOVER_LOG", vbucket=1)
    assert reply["status"] == "Success"
    assert [(r["opaque"], r["status"]) for r in client.backlog if r["opcode"] == "DCP_BUFFER_ACKNOWLEDGEMENT"] == \
        [(bad, "Einval")]


# --- 7. collection error bodies (reference 3.4.4, 5) ------------------------------------------------------------
@pytest.mark.parametrize(("value", "status"), [('{"collections":["77"]}', "UnknownCollection"),
                                               ('{"scope":"77"}', "UnknownScope")])
def test_unknown_collection_and_scope_bodies_carry_the_manifest_uid(server: Server, value: str,
                                                                    status: str) -> None:
    client = producer(server, "Collections")
    reply = client.stream_request(0, value=value)
    assert reply["status"] == status
    body = json.loads(reply["value"])
    assert body["manifest_uid"] == "0"
    assert set(body) <= {"manifest_uid", "error"}


def test_without_xerror_an_error_has_no_body(server: Server) -> None:
    client = Client(server.port)
    assert client.hello("Collections")["status"] == "Success"
    assert client.plain()["status"] == "Success"
    assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
    assert client.call(opcode="DCP_OPEN", key="legacy", seqno=0, flags=DcpOpenFlag.PRODUCER)["status"] == "Success"
    assert client.call(opcode="DCP_CONTROL", key="enable_noop", value="true")["status"] == "Success"
    for value, status in (('{"collections":["77"]}', "UnknownCollection"), ('{"scope":"77"}', "UnknownScope"),
                          ('{"collections":["0"],"scope":"0"}', "Einval")):
        reply = client.stream_request(0, value=value)
        assert (reply["status"], reply.get("value", "")) == (status, ""), reply


def test_without_xerror_a_durability_error_disconnects(server: Server) -> None:
    """Reference 5: an old client cannot be told DurabilityInvalidLevel (and the other statuses of its list):
    the server disconnects it; a client with XERROR gets the status."""
    for features, answered in ((("Xerror",), True), ((), False)):
        client = Client(server.port)
        assert client.hello("MutationSeqno", "JSON", *features)["status"] == "Success"
        assert client.plain()["status"] == "Success"
        assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
        client.send(opcode="SET", magic="AltClientRequest", vbucket=0, key="durable", value="{}", flags=0,
                    expiration=0, frame_infos=[{"id": 1, "durability_level": 9}])
        if answered:
            assert client.read()["status"] == "DurabilityInvalidLevel"
        else:
            with pytest.raises(ConnectionError):
                client.read()


def test_a_document_command_on_an_unknown_collection_without_xerror(server: Server) -> None:
    client = Client(server.port)
    assert client.hello("Collections")["status"] == "Success"
    client.collections = True
    assert client.plain()["status"] == "Success"
    assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
    reply = client.call(opcode="GET", vbucket=0, collection_id=77, key="x")
    assert (reply["status"], reply.get("value", "")) == ("UnknownCollection", "")
    xerror = authenticated(server, "Collections")
    xerror.collections = True
    reply = xerror.call(opcode="GET", vbucket=0, collection_id=77, key="x")
    assert (reply["status"], json.loads(reply["value"])["manifest_uid"]) == ("UnknownCollection", "0")


# --- 8. SELECT_BUCKET @no bucket@ (reference 4.3) ---------------------------------------------------------------
def test_no_bucket_deselects(server: Server) -> None:
    client = authenticated(server)
    assert client.call(opcode="GET_FAILOVER_LOG", vbucket=1)["status"] == "Success"
    assert client.call(opcode="SELECT_BUCKET", key=NO_BUCKET)["status"] == "Success"
    assert client.call(opcode="GET_FAILOVER_LOG", vbucket=1)["status"] == "NoBucket"
    assert client.call(opcode="DCP_OPEN", key="x", seqno=0, flags=DcpOpenFlag.PRODUCER)["status"] == "NoBucket"
    assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
    assert client.call(opcode="GET_FAILOVER_LOG", vbucket=1)["status"] == "Success"
    dcp = producer(server)
    assert dcp.call(opcode="SELECT_BUCKET", key=NO_BUCKET)["status"] == "NotSupported"  # a DCP connection


# --- 9. noop opaques (reference 3.13) ----------------------------------------------------------------------------
def test_noop_opaques_count_up_from_ten_million_and_one(server: Server) -> None:
    client = producer(server, set_noop_interval="0.1")
    opaques = []
    while len(opaques) < 3:
        record = client.read()
        if record["opcode"] == "DCP_NOOP" and record["magic"] == "ClientRequest":
            opaques.append(record["opaque"])
            client.send(magic="ClientResponse", opcode="DCP_NOOP", status="Success", opaque=record["opaque"])
    assert opaques == [10_000_001, 10_000_002, 10_000_003]
