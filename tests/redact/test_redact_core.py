"""The pure core: one message in, bytes of the same length out, and the placeholders' properties."""

from __future__ import annotations

import ipaddress
import json

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vectorfile import all_vectors

from dcpctl.protocol import build
from dcpctl.protocol.constants import (
    DATATYPE_JSON,
    DATATYPE_SNAPPY,
    DATATYPE_XATTR,
    Opcode,
    ServerOpcode,
    Status,
    SubdocPathFlag,
)
from dcpctl.protocol.frameinfo import IMPERSONATE_USER, FrameInfo
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.protocol.registry import DIALECTS
from dcpctl.protocol.value import Xattr, build_xattrs, parse_xattrs, snappy_decompress
from dcpctl.redact.address import EPHEMERAL_PORTS, AddressMap
from dcpctl.redact.core import FIELDS_KEPT, Policy, Redactor

ITEM = {"by_seqno": 5, "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0}


def _mutation(key: bytes, value: bytes, datatype: int = 0) -> bytes:
    return build.request(Opcode.DCP_MUTATION, vbucket=9, cas=77, key=key, value=value, datatype=datatype, **ITEM)


def test_header_and_extras_are_kept_and_the_key_replaced() -> None:
    raw = _mutation(b"\x08customer-key", b"plain value")
    out = Redactor(b"salt").message(decode(raw, 0, DecodeOptions(collections=True)))
    assert len(out) == len(raw)
    assert out[:24 + 31] == raw[:24 + 31]
    assert out[55:56] == b"\x08"  # the collection id prefix
    assert b"customer-key" not in out
    assert b"plain value" not in out


def test_the_same_key_gives_the_same_placeholder_and_another_salt_another() -> None:
    one = Redactor(b"salt").placeholder(b"key", b"airline_10")
    assert one == Redactor(b"salt").placeholder(b"key", b"airline_10")
    assert one != Redactor(b"pepper").placeholder(b"key", b"airline_10")
    assert len(one) == len(b"airline_10")
    assert one.isalnum()


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=12),
       st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " \t:\r\n")]), st.booleans())
def test_json_keeps_structure_names_and_length(document: object, separators: tuple[str, str], ascii_only: bool) -> None:
    # escapes (\" \\ \u00e9) and white space around colons: the string scanner's hard cases
    text = json.dumps(document, separators=separators, ensure_ascii=ascii_only).encode()
    out = Redactor(b"salt").json(text)
    assert out is not None
    assert len(out) == len(text)
    redone = json.loads(out)
    assert _shape(redone) == _shape(document)


def _shape(value: object) -> object:
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return type(value).__name__ if not isinstance(value, bool | type(None)) else value


def test_xattr_names_kept_values_replaced_unless_kept() -> None:
    blob = build_xattrs([Xattr("_sync", '{"rev":"2-abc"}'), Xattr("meta", "secret meta")])
    raw = _mutation(b"k", blob + b'{"a":"body"}', DATATYPE_XATTR | DATATYPE_JSON)
    msg = decode(raw)
    out = Redactor(b"salt", Policy(frozenset({"meta"}))).message(msg)
    parsed = parse_xattrs(decode(out).value)
    assert not isinstance(parsed, str)
    pairs, _ = parsed
    assert [p.key for p in pairs] == ["_sync", "meta"]
    assert pairs[1].value == "secret meta"
    assert json.loads(pairs[0].value).keys() == {"rev"}
    assert "2-abc" not in pairs[0].value


@pytest.mark.parametrize("datatype", [0, DATATYPE_JSON, DATATYPE_XATTR | DATATYPE_JSON, DATATYPE_SNAPPY])
def test_drop_values_empties_a_document_and_makes_the_header_true(datatype: int) -> None:
    value = build_xattrs([Xattr("meta", "x")]) + b'{"a":1}' if datatype & DATATYPE_XATTR else b'{"a":1}'
    if datatype & DATATYPE_SNAPPY:
        value = bytes(cramjam.snappy.compress_raw(value))
    msg = decode(_mutation(b"k", value, datatype))
    out = decode(Redactor(b"salt", Policy(drop_values=True)).message(msg))
    assert out.value == b""
    assert out.total_body_length == msg.total_body_length - len(value)
    assert (out.extras, out.datatype, out.cas) == (msg.extras, msg.datatype, msg.cas)
    assert not out.diagnostics


def test_drop_values_leaves_the_least_value_a_message_must_have() -> None:
    msg = decode(build.request(Opcode.APPEND, key=b"k", value=b"secret tail"))
    out = decode(Redactor(b"salt", Policy(drop_values=True)).message(msg))
    assert out.value == b"0"
    assert not out.diagnostics


def test_a_snappy_document_is_redacted_inside() -> None:
    document = json.dumps({"name": "Very Secret Name", "n": 12345}).encode()
    raw = _mutation(b"k", bytes(cramjam.snappy.compress_raw(document)), DATATYPE_JSON | DATATYPE_SNAPPY)
    out = decode(Redactor(b"salt").message(decode(raw)))
    inflated = snappy_decompress(out.value)
    assert isinstance(inflated, bytes)
    assert b"Very Secret Name" not in inflated
    assert b"12345" not in inflated
    json.loads(inflated)


def test_sasl_values_and_the_user_agent_are_overwritten() -> None:
    auth = build.request(Opcode.SASL_AUTH, key=b"PLAIN", value=b"\x00user\x00password")
    out = Redactor(b"salt").message(decode(auth))
    assert out.endswith(b"*" * len(b"\x00user\x00password"))
    assert b"PLAIN" in out
    hello = build.request(Opcode.HELLO, key=b'{"a":"my-app/1.0 (host-42)","i":"abc/def"}', features=[])
    out = Redactor(b"salt").message(decode(hello))
    assert b'"a":' in out
    assert b"my-app" not in out
    assert b"host-42" not in out


def test_a_message_cut_short_keeps_its_numbers_not_its_key_or_value() -> None:
    """Its extras are the protocol's numbers (by_seqno first): zeroed, they read as a seqno 0 going backwards.
    A key cut short has no placeholder of its own, and a value cut short cannot be redacted as a whole one."""
    whole = _mutation(b"customer-key", b"confidential value")
    key_at = 24 + 31
    value_at = key_at + len(b"customer-key")
    in_extras = whole[:40]
    assert Redactor(b"salt").message(decode(in_extras)) == in_extras  # header and by_seqno, rev_seqno's half
    in_key = whole[:key_at + 5]
    assert Redactor(b"salt").message(decode(in_key)) == whole[:key_at] + bytes(5)
    in_value = whole[:value_at + 7]
    out = Redactor(b"salt").message(decode(in_value))
    assert out[:key_at] == whole[:key_at]
    # the key's placeholder is the whole message's, so decode still tells which document it was
    assert out[key_at:value_at] == Redactor(b"salt").message(decode(whole))[key_at:value_at] != whole[key_at:value_at]
    assert out[value_at:] == bytes(7)


def test_address_mapping_preserves_prefixes() -> None:
    mapping = AddressMap(b"salt")
    a, b = mapping(bytes([10, 1, 2, 3])), mapping(bytes([10, 1, 2, 77]))
    assert a[:3] == b[:3]
    assert a != bytes([10, 1, 2, 3])
    assert mapping(bytes([10, 1, 2, 3])) == AddressMap(b"salt")(bytes([10, 1, 2, 3]))
    c, d = mapping(bytes(16)), mapping(bytes(15) + b"\x01")
    assert c[:15] == d[:15]
    assert c != d


def test_port_mapping_permutes_clients_ports_and_keeps_services() -> None:
    """--map-addresses maps a client's ephemeral port (32768 and up) one to one onto that range, by the salt;
    a port below it names a service and stays, as do the servers' ports given, which no client's port may
    then become (a client's port on 11210's side would read as a server)."""
    mapping = AddressMap(b"salt")
    ephemeral = range(EPHEMERAL_PORTS, 65536)
    images = [mapping.port(port) for port in ephemeral]
    assert sorted(images) == list(ephemeral)  # a permutation of the range
    assert sum(image == port for port, image in zip(ephemeral, images, strict=True)) < 10
    assert [mapping.port(port) for port in (0, 22, 1023, 11210, 18091, EPHEMERAL_PORTS - 1)] == \
        [0, 22, 1023, 11210, 18091, EPHEMERAL_PORTS - 1]
    assert AddressMap(b"salt").port(50123) == mapping.port(50123)
    assert AddressMap(b"pepper").port(50123) != mapping.port(50123)
    # a server listening on an ephemeral port (a test's, a cluster_run's): kept, and no client becomes it
    server = mapping.port(50123)
    keeping = AddressMap(b"salt", frozenset({server}))
    assert keeping.port(server) == server
    images = [keeping.port(port) for port in ephemeral]
    assert sorted(images) == list(ephemeral)
    assert keeping.port(50123) not in {50123, server}
    assert mapping.counts()["ports"] == 65536 - EPHEMERAL_PORTS


def test_mac_mapping_keeps_the_vendor_and_the_flags() -> None:
    """A vendor's MAC address keeps its vendor's three bytes, the rest mapped prefix-preserving; a locally
    administered one (a container's) is mapped but for its two flag bits; broadcast and multicast stay."""
    mapping = AddressMap(b"salt")
    vmware_a, vmware_b = bytes.fromhex("005056123456"), bytes.fromhex("005056123457")
    a, b = mapping.mac(vmware_a), mapping.mac(vmware_b)
    assert a[:3] == b[:3] == vmware_a[:3]
    assert a != vmware_a
    assert a[:5] == b[:5]  # they share 47 bits, and still do
    assert a != b
    docker = bytes.fromhex("0242ac110002")
    mapped = mapping.mac(docker)
    assert mapped[0] & 3 == docker[0] & 3 == 2
    assert mapped[1:] != docker[1:]
    for group in (b"\xff" * 6, bytes.fromhex("01005e000001"), bytes.fromhex("333300000001"), bytes(6)):
        assert mapping.mac(group) == group  # a group, or loopback's all-zero address
    assert AddressMap(b"salt").mac(docker) == mapped
    assert AddressMap(b"pepper").mac(docker) != mapped
    assert mapping.counts()["macs"] == 3


def test_ports_written_with_addresses_are_mapped_as_the_frames_are() -> None:
    """A stat's or a log line's ``ADDRESS:PORT`` (``[v6]:PORT``): the client's port maps as in the TCP header;
    a service's stays; a number past 65535 is no port and stays."""
    redactor = Redactor(b"salt", addresses=AddressMap(b"salt"))
    assert redactor.addresses is not None
    text = b"peer 10.1.2.3:54321 sock 10.1.2.200:11210 v6 [fd00::12]:50000 odd 10.1.2.3:99999 at 12:30:45"
    port = redactor.addresses.port
    v4, v4_node, v6 = _mapped(redactor, "10.1.2.3"), _mapped(redactor, "10.1.2.200"), _mapped(redactor, "fd00::12")
    assert redactor.addresses_in(text) == (f"peer {v4}:{port(54321)} sock {v4_node}:11210 v6 [{v6}]:{port(50000)} "
                                           f"odd {v4}:99999 at 12:30:45").encode()
    assert port(54321) != 54321


def _vector(name: str) -> tuple[bytes, DecodeOptions]:
    found = next(v for v in all_vectors() if v.name == name)
    return found.data, DecodeOptions(DIALECTS[found.dialect], found.collections, lenient=found.lenient)


def test_what_a_row_declares_decides_its_redaction() -> None:
    """Facts of the registry rows, not lists in redact/: a system event's key is a collection's name (hashed
    with --hash-names), the UPR draft's stream messages carry documents' keys in a text key."""
    raw, options = _vector("real_system_event_begin_collection")
    assert Redactor(b"salt").message(decode(raw, 0, options)) == raw
    hashed = Redactor(b"salt", Policy(hash_names=True))
    out = hashed.message(decode(raw, 0, options))
    assert b"col1" not in out
    assert len(out) == len(raw)
    assert hashed.counts["names"] == 1
    for name in ("001_11_upr_stream_message_response", "001_12_upr_stream_message_response"):
        raw, options = _vector(name)
        out = Redactor(b"salt").message(decode(raw, 0, options))
        assert b"mykey" in raw
        assert b"mykey" not in out
        assert out[:24] == raw[:24]


def test_a_range_scans_key_range_is_customer_data() -> None:
    # the create's JSON names the keys the scan starts and ends at (base64 of document keys)
    start, end = "YWlybGluZV8x", "YWlybGluZV85"  # airline_1, airline_9
    body = json.dumps({"collection": "8", "range": {"start": start, "end": end}}).encode()
    raw = build.request(Opcode.RANGE_SCAN_CREATE, vbucket=3, value=body, datatype=DATATYPE_JSON)
    out = Redactor(b"salt").message(decode(raw, 0, DecodeOptions()))
    assert len(out) == len(raw)
    assert start.encode() not in out
    assert end.encode() not in out
    assert _shape(json.loads(out[24:])) == _shape(json.loads(body))


def _bucket_config(name: str, uuid: str = "ae4c45a9818aee3bd83bf65d10c99d9d") -> dict[str, object]:
    """A bucket's cluster map as ns_server writes it (the names and URIs of Couchbase 7's terse bucket info)."""
    encoded = name.replace("%", "%25")
    return {"rev": 2, "revEpoch": 2, "name": name, "nodeLocator": "vbucket", "uuid": uuid,
            "uri": f"/pools/default/buckets/{encoded}?bucket_uuid={uuid}",
            "streamingUri": f"/pools/default/bucketsStreaming/{encoded}?bucket_uuid={uuid}",
            "bucketCapabilitiesVer": "", "bucketCapabilities": ["collections", "dcp", "couchapi", "xattr"],
            "collectionsManifestUid": "1", "ddocs": {"uri": f"/pools/default/buckets/{encoded}/ddocs"},
            "nodes": [{"couchApiBase": f"http://$HOST:8092/{encoded}%2B{uuid}", "hostname": "$HOST:8091",
                       "ports": {"direct": 11210}}],
            "vBucketServerMap": {"hashAlgorithm": "CRC", "numReplicas": 1, "serverList": ["$HOST:11210"],
                                 "vBucketMap": [[0, -1], [0, -1]]}}


@pytest.mark.parametrize("bucket", ["travel-sample", "sales%eu", "dc"])
def test_hash_names_hashes_a_cluster_maps_bucket_in_its_uris_too(bucket: str) -> None:
    """A cluster map names its bucket in "name" and again in its URIs (percent-encoded): --hash-names gives
    each word of the name one placeholder in all of them, and changes nothing else of the map."""
    config = _bucket_config(bucket)
    raw = build.response(Opcode.GET_CLUSTER_CONFIG, value=json.dumps(config).encode(), datatype=DATATYPE_JSON)
    assert Redactor(b"salt").message(decode(raw, 0, DecodeOptions())) == raw
    redactor = Redactor(b"salt", Policy(hash_names=True))
    out = redactor.message(decode(raw, 0, DecodeOptions()))
    assert len(out) == len(raw)
    got = json.loads(out[24:])
    hashed = got["name"]
    assert hashed == redactor.name(bucket.encode()).decode()
    assert hashed != bucket
    # the same map around the hashed name: its URIs name it encoded as they named the bucket; "dc" is not in "dcp"
    assert got == _bucket_config(hashed)


def test_hash_names_hashes_the_bucket_a_map_notification_names() -> None:
    # the server's ClustermapChangeNotification: key the bucket's name, value the map (reference 4.9)
    config = json.dumps(_bucket_config("travel-sample")).encode()
    raw = build.server_request(ServerOpcode.CLUSTERMAP_CHANGE_NOTIFICATION, key=b"travel-sample", value=config,
                               datatype=DATATYPE_JSON, epoch=2, revision=2)
    redactor = Redactor(b"salt", Policy(hash_names=True))
    out = redactor.message(decode(raw, 0, DecodeOptions()))
    assert len(out) == len(raw)
    assert b"travel-sample" not in out
    msg = decode(out, 0, DecodeOptions())
    assert msg.key == redactor.name(b"travel-sample") == json.loads(msg.value)["name"].encode()


def test_hash_names_hashes_the_names_stats_mention() -> None:
    """Stats name connections and collections in their keys and values: the words of every name hashed
    before (a DCP_OPEN's, a manifest's) are replaced there too, as words of their own only."""
    redactor = Redactor(b"salt", Policy(hash_names=True))
    opened = redactor.message(decode(build.request(Opcode.DCP_OPEN, key=b"eventing:orders-eu:fn1", seqno=0,
                                                   flags=1), 0, DecodeOptions()))
    name = decode(opened, 0, DecodeOptions()).key
    assert name.count(b":") == 2
    assert b"orders-eu" not in name
    manifest = {"uid": "2", "scopes": [{"name": "inventory", "uid": "8",
                                        "collections": [{"name": "airline", "uid": "9"}]}]}
    redactor.message(decode(build.response(Opcode.COLLECTIONS_GET_MANIFEST, value=json.dumps(manifest).encode(),
                                           datatype=DATATYPE_JSON), 0, DecodeOptions()))
    for key, value in ((b"eq_dcpq:eventing:orders-eu:fn1:items_sent", b"12"),
                       (b"0x8:0x9:name", b"airline"), (b"0x8:name", b"inventory"),
                       (b"airlines_total", b"inventory-eu")):  # other words that only start alike
        raw = build.response(Opcode.STAT, key=key, value=value)
        out = decode(redactor.message(decode(raw, 0, DecodeOptions())), 0, DecodeOptions())
        assert len(out.raw) == len(raw)
        assert (out.key, out.value) == (redactor.mentions(key), redactor.mentions(value))
        assert (out.key, out.value) != (key, value) or key == b"airlines_total"
    stat = decode(redactor.message(decode(build.response(Opcode.STAT, key=b"eq_dcpq:eventing:orders-eu:fn1:x"),
                                          0, DecodeOptions())), 0, DecodeOptions())
    assert stat.key.startswith(b"eq_dcpq:" + name + b":")
    asked = decode(redactor.message(decode(build.request(Opcode.STAT, key=b"dcp-vbtakeover 5 eventing:orders-eu:fn1"),
                                           0, DecodeOptions())), 0, DecodeOptions())
    assert asked.key == b"dcp-vbtakeover 5 " + name  # the request's arguments too
    # a dcp stats request's filter names a user (and a port, kept)
    value = json.dumps({"filter": {"user": "alice-ops", "port": 50123}}).encode()
    filtered = decode(redactor.message(decode(build.request(Opcode.STAT, key=b"dcp", value=value,
                                                            datatype=DATATYPE_JSON), 0, DecodeOptions())),
                      0, DecodeOptions())
    assert filtered.key == b"dcp"
    assert json.loads(filtered.value) == {"filter": {"user": redactor.name(b"alice-ops").decode(), "port": 50123}}
    assert b"alice" not in filtered.value
    assert redactor.mentions(b"0x8:0x9:name") == b"0x8:0x9:name"  # stats' own words are not names
    assert b"airline" not in redactor.mentions(b"airline")
    assert redactor.mentions(b"airlines") == b"airlines"
    # without --hash-names stats stay as they are
    raw = build.response(Opcode.STAT, key=b"0x8:0x9:name", value=b"airline")
    plain = Redactor(b"salt")
    plain.message(decode(build.request(Opcode.SELECT_BUCKET, key=b"airline"), 0, DecodeOptions()))
    assert plain.message(decode(raw, 0, DecodeOptions())) == raw


def test_hash_names_hashes_the_names_an_error_body_mentions() -> None:
    """An error's body is the server's text about the request ({"error":{"context":...}}): the words of the
    names hashed before are replaced there too; its other words and its structure stay."""
    redactor = Redactor(b"salt", Policy(hash_names=True))
    asked = decode(redactor.message(decode(build.request(Opcode.COLLECTIONS_GET_ID, key=b"inventory.airline"), 0,
                                           DecodeOptions())), 0, DecodeOptions())
    body = {"manifest_uid": "1f", "error": {"context": "Unknown collection inventory.airline", "ref": "5a1e"}}
    raw = build.response(Opcode.COLLECTIONS_GET_ID, status=Status.UNKNOWN_COLLECTION, datatype=DATATYPE_JSON,
                         value=json.dumps(body).encode())
    out = decode(redactor.message(decode(raw, 0, DecodeOptions())), 0, DecodeOptions())
    assert len(out.raw) == len(raw)
    got = json.loads(out.value)
    assert got["error"]["context"] == "Unknown collection " + asked.key.decode()
    assert {got["manifest_uid"], got["error"]["ref"]} == {"1f", "5a1e"}
    assert b"airline" not in out.raw
    assert Redactor(b"salt").message(decode(raw, 0, DecodeOptions())) == raw  # kept without --hash-names


def test_hash_names_hashes_names_in_values_too() -> None:
    """Names a value holds: a collections path in the value (clients since MB-42701), the users of
    ActiveExternalUsers, a DCP consumer's name in DCP_OPEN's JSON and in its control; the same word, the same
    placeholder as in the connection's name."""
    redactor = Redactor(b"salt", Policy(hash_names=True))

    def redacted(raw: bytes) -> bytes:
        out = redactor.message(decode(raw, 0, DecodeOptions()))
        assert len(out) == len(raw)
        return out

    connection = b"replication:ns_1@node-a->ns_1@node-b:orders"
    name = decode(redacted(build.request(Opcode.DCP_OPEN, key=connection, seqno=0, flags=1)), 0,
                  DecodeOptions()).key
    value = json.dumps({"consumer_name": connection.decode()}).encode()
    opened = decode(redacted(build.request(Opcode.DCP_OPEN, key=connection, value=value, seqno=0, flags=1)), 0,
                    DecodeOptions())
    assert json.loads(opened.value) == {"consumer_name": name.decode()}
    control = decode(redacted(build.request(Opcode.DCP_CONTROL, key=b"consumer_name", value=connection)), 0,
                     DecodeOptions())
    assert (control.key, control.value) == (b"consumer_name", name)
    assert decode(redacted(build.request(Opcode.DCP_CONTROL, key=b"enable_noop", value=b"true")), 0,
                  DecodeOptions()).value == b"true"
    path = decode(redacted(build.request(Opcode.COLLECTIONS_GET_ID, value=b"inventory.airline")), 0,
                  DecodeOptions()).value
    assert path == redactor.name(b"inventory.airline")
    assert b"inventory" not in path
    assert b"airline" not in path
    users = decode(redacted(build.server_request(ServerOpcode.ACTIVE_EXTERNAL_USERS, value=b'["alice","bob"]',
                                                 datatype=DATATYPE_JSON)), 0, DecodeOptions()).value
    assert len(json.loads(users)) == 2
    assert b"alice" not in users
    assert b"bob" not in users


def _collection_event(version: int, name: str = "orders") -> bytes:
    fields = {"manifest_uid": 0x1F, "scope_id": 8, "collection_id": 9}
    if version == 2:
        fields |= {"ttl_valid": True, "max_ttl": 60, "name": name, "history": True,
                   "default_collection_mvs": 0, "metered": False, "flush_uid": 0}
    return build.request(Opcode.DCP_SYSTEM_EVENT, vbucket=3, key=name.encode(), by_seqno=4, event_id=0,
                         event_version=version, **fields)


@pytest.mark.parametrize("version", [0, 2])
def test_a_key_an_address_lengthens_leaves_the_value_whole(version: int) -> None:
    """A key whose mapped address is longer moves the value after it: the value is written where it now
    starts, not where it was (a system event's ids were overwritten). In a version-2 table the name cannot
    change length (the table's offsets would move): a name whose mapping would is a placeholder there. (No
    collection name holds a dot; a hostile capture's may.)"""
    redactor = Redactor(b"salt", addresses=AddressMap(b"salt"))
    mapped = _mapped(redactor, "10.1.2.3")
    assert len(mapped) != len("10.1.2.3")
    raw = _collection_event(version, "10.1.2.3")
    seen = decode(redactor.message(decode(raw, 0, DecodeOptions(collections=True))), 0,
                  DecodeOptions(collections=True))
    assert not seen.diagnostics
    assert seen.key == mapped.encode()
    fields = seen.value_fields
    assert (fields["manifest_uid"], fields["scope_id"], fields["collection_id"]) == (0x1F, 8, 9)
    if version == 2:
        assert len(fields["name"]) == len("10.1.2.3")
        assert "10.1.2.3" not in fields["name"]


def test_a_connection_name_an_address_lengthens_keeps_its_json_value() -> None:
    name = b"replication:ns_1@10.1.2.3->ns_1@10.1.2.44:orders"
    value = json.dumps({"consumer_name": "orders-consumer"}).encode()
    redactor = Redactor(b"salt", addresses=AddressMap(b"salt"))
    raw = build.request(Opcode.DCP_OPEN, key=name, value=value, datatype=DATATYPE_JSON, seqno=0, flags=1)
    seen = decode(redactor.message(decode(raw, 0, DecodeOptions())), 0, DecodeOptions())
    assert not seen.diagnostics
    assert b"10.1.2.3" not in seen.key
    assert len(seen.key) != len(name)
    assert json.loads(seen.value) == {"consumer_name": "orders-consumer"}


@pytest.mark.parametrize("version", [0, 2])
def test_a_collection_event_keeps_its_ids_and_its_name_unless_names_are_hashed(version: int) -> None:
    """A BeginCollection event, legacy or FlatBuffers: the manifest uid, scope and collection ids always
    stay; its name, in the key and (version 2) in the table, is kept, or hashed to one placeholder."""
    raw = _collection_event(version)
    assert Redactor(b"salt").message(decode(raw, 0, DecodeOptions(collections=True))) == raw
    redactor = Redactor(b"salt", Policy(hash_names=True))
    out = redactor.message(decode(raw, 0, DecodeOptions(collections=True)))
    assert len(out) == len(raw)
    assert b"orders" not in out
    seen = decode(out, 0, DecodeOptions(collections=True))
    assert not seen.diagnostics
    fields = seen.value_fields
    assert (fields["manifest_uid"], fields["scope_id"], fields["collection_id"]) == (0x1F, 8, 9)
    assert seen.key == redactor.name(b"orders")
    if version == 2:
        assert fields["name"].encode() == seen.key
        assert (fields["ttl_valid"], fields["max_ttl"], fields["history"]) == (True, 60, True)


@pytest.mark.parametrize("opcode", [Opcode.GET, Opcode.GET_CLUSTER_CONFIG])
def test_hash_names_hashes_the_user_a_request_impersonates(opcode: int) -> None:
    # frame info 4: the user a request acts for (``^name``: an external user), kept in clear by default
    impersonated = FrameInfo(IMPERSONATE_USER, b"^alice.admin", 0, 0)
    raw = build.request(opcode, key=b"doc-1" if opcode == Opcode.GET else b"", frame_infos=[impersonated])
    assert Redactor(b"salt").message(decode(raw, 0, DecodeOptions())).find(b"alice") > 0
    redactor = Redactor(b"salt", Policy(hash_names=True))
    out = redactor.message(decode(raw, 0, DecodeOptions()))
    assert len(out) == len(raw)
    frames = decode(out, 0, DecodeOptions()).frame_infos
    assert [(f.id, f.data) for f in frames] == [(IMPERSONATE_USER, redactor.name(b"^alice.admin"))]
    assert frames[0].data.startswith(b"^")
    assert b"alice" not in out
    assert b"admin" not in out


def _mapped(redactor: Redactor, text: str) -> str:
    assert redactor.addresses is not None
    return str(ipaddress.ip_address(redactor.addresses(ipaddress.ip_address(text).packed)))


def test_map_addresses_maps_the_addresses_messages_write_as_the_frames_are() -> None:
    """A cluster map's nodes and a replication's connection name hold the nodes' addresses as text: with
    --map-addresses they map as the frames' IP headers do (same salt, same map), their text's length free,
    the lengths in the header made true."""
    redactor = Redactor(b"salt", addresses=AddressMap(b"salt"))
    config = {"rev": 7, "name": "orders", "nodesExt": [
        {"hostname": "10.1.2.3", "services": {"kv": 11210}}, {"hostname": "fd00::12", "services": {"kv": 11210}}],
        "vBucketServerMap": {"serverList": ["10.1.2.3:11210", "[fd00::12]:11210"], "vBucketMap": [[0], [1]]},
        "uptime": "12:30:45", "mac": "aa:bb:cc:dd:ee:ff", "version": "7.6.2-3505", "odd": "999.1.1.1"}
    raw = build.response(Opcode.GET_CLUSTER_CONFIG, value=json.dumps(config).encode(), datatype=DATATYPE_JSON)
    msg = decode(redactor.message(decode(raw, 0, DecodeOptions())), 0, DecodeOptions())
    assert not msg.diagnostics
    got = json.loads(msg.value)
    v4, v6 = _mapped(redactor, "10.1.2.3"), _mapped(redactor, "fd00::12")
    assert [node["hostname"] for node in got["nodesExt"]] == [v4, v6]
    assert got["vBucketServerMap"]["serverList"] == [f"{v4}:11210", f"[{v6}]:11210"]
    assert {k: got[k] for k in ("uptime", "mac", "version", "odd", "name", "rev")} == \
        {k: config[k] for k in ("uptime", "mac", "version", "odd", "name", "rev")}
    # in a key (the header's key length follows it), with the alternative magic's one-byte key length too
    name = b"replication:ns_1@10.1.2.3->ns_1@10.1.2.44:orders"
    for raw in (build.request(Opcode.DCP_OPEN, key=name, seqno=0, flags=1),
                build.request(Opcode.DCP_OPEN, key=name, seqno=0, flags=1, frame_infos=[
                    FrameInfo(IMPERSONATE_USER, b"admin", 0, 0)])):
        msg = decode(redactor.message(decode(raw, 0, DecodeOptions())), 0, DecodeOptions())
        assert not msg.diagnostics
        assert msg.key == (f"replication:ns_1@{_mapped(redactor, '10.1.2.3')}->"
                           f"ns_1@{_mapped(redactor, '10.1.2.44')}:orders").encode()
    # without --map-addresses the text stays
    assert Redactor(b"salt").message(decode(raw, 0, DecodeOptions())) == raw


def test_map_addresses_hashes_the_host_names_a_map_gives_its_nodes() -> None:
    """Nodes named by host name (a customer's domain) are hashed word by word under --map-addresses, ports,
    ``$HOST`` and addresses kept as such, the same host the same placeholder in the map's server list, its
    URLs and a later replication's connection name."""
    config = {"rev": 9, "name": "orders", "nodesExt": [{"hostname": "cb1.prod.acme.com"}, {"hostname": "$HOST"},
                                                       {"hostname": "10.1.2.3"}],
              "nodes": [{"hostname": "cb1.prod.acme.com:8091",
                         "couchApiBase": "http://cb1.prod.acme.com:8092/orders%2B1f"}],
              "vBucketServerMap": {"serverList": ["cb1.prod.acme.com:11210", "$HOST:11210", "10.1.2.3:11210"]}}
    raw = build.response(Opcode.GET_CLUSTER_CONFIG, value=json.dumps(config).encode(), datatype=DATATYPE_JSON)
    assert Redactor(b"salt").message(decode(raw, 0, DecodeOptions())) == raw
    redactor = Redactor(b"salt", addresses=AddressMap(b"salt"))
    msg = decode(redactor.message(decode(raw, 0, DecodeOptions())), 0, DecodeOptions())
    assert not msg.diagnostics
    assert b"acme" not in msg.value
    assert b"prod" not in msg.value
    got = json.loads(msg.value)
    host, ip = got["nodesExt"][0]["hostname"], _mapped(redactor, "10.1.2.3")
    assert len(host) == len("cb1.prod.acme.com")
    assert host.count(".") == 3
    assert got["nodesExt"][1:] == [{"hostname": "$HOST"}, {"hostname": ip}]
    assert got["nodes"] == [{"hostname": f"{host}:8091", "couchApiBase": f"http://{host}:8092/orders%2B1f"}]
    assert got["vBucketServerMap"]["serverList"] == [f"{host}:11210", "$HOST:11210", f"{ip}:11210"]
    assert got["name"] == "orders"  # bucket names are --hash-names' to hash
    assert redactor.counts["host_names"] == 2
    opened = decode(redactor.message(decode(build.request(
        Opcode.DCP_OPEN, key=b"replication:ns_1@cb1.prod.acme.com->ns_1@10.1.2.3:orders", seqno=0, flags=1), 0,
        DecodeOptions())), 0, DecodeOptions()).key
    assert opened == f"replication:ns_1@{host}->ns_1@{ip}:orders".encode()


def test_a_key_whose_mapped_addresses_outgrow_its_length_field_is_zeroed() -> None:
    # the alternative magics give the key one byte of length: 31 short addresses mapped to longer text no
    # longer fit, so the key is emptied of everything (zeros) and the lengths stay true
    key = b" ".join([b"1.1.1.1"] * 31)
    raw = build.request(Opcode.DCP_OPEN, key=key, seqno=0, flags=1,
                        frame_infos=[FrameInfo(IMPERSONATE_USER, b"a", 0, 0)])
    redactor = Redactor(b"salt", addresses=AddressMap(b"salt"))
    assert len(redactor.addresses_in(key)) > 0xFF
    out = redactor.message(decode(raw, 0, DecodeOptions()))
    msg = decode(out, 0, DecodeOptions())
    assert not msg.diagnostics
    assert msg.key == bytes(len(key))


def test_a_compressed_cluster_map_is_redacted_inside() -> None:
    # HELLO SnappyEverywhere: the server may compress a cluster map as it compresses documents
    config = json.dumps({"rev": 7, "name": "orders", "uri": "/pools/default/buckets/orders?bucket_uuid=1",
                         "nodesExt": [{"hostname": "10.1.2.3"}]}).encode()
    raw = build.response(Opcode.GET_CLUSTER_CONFIG, value=bytes(cramjam.snappy.compress_raw(config)),
                         datatype=DATATYPE_JSON | DATATYPE_SNAPPY)
    redactor = Redactor(b"salt", Policy(hash_names=True), addresses=AddressMap(b"salt"))
    msg = decode(redactor.message(decode(raw, 0, DecodeOptions())), 0, DecodeOptions())
    assert not msg.diagnostics
    inflated = snappy_decompress(msg.value)
    assert isinstance(inflated, bytes)
    got = json.loads(inflated)
    assert got["name"] == redactor.name(b"orders").decode()
    assert got["uri"] == f"/pools/default/buckets/{got['name']}?bucket_uuid=1"
    assert got["nodesExt"] == [{"hostname": _mapped(redactor, "10.1.2.3")}]


# --- --no-keep-json-names --------------------------------------------------------------------------------
HASHED_NAMES = Policy(keep_json_names=False)


class _Pairs(list[tuple[str, object]]):
    """A JSON object as its name-value pairs: a name that occurs twice is kept twice."""


def _names(value: object) -> list[str]:
    """Every JSON name in ``value`` (parsed with :class:`_Pairs` objects), depth first, in document order."""
    if isinstance(value, _Pairs):
        return [name for key, item in value for name in (key, *_names(item))]
    if isinstance(value, list):
        return [name for item in value for name in _names(item)]
    return []


def _parsed(text: bytes) -> object:
    return json.loads(text, object_pairs_hook=_Pairs)


def _skeleton(value: object) -> object:
    """A parsed value without its names and leaves' values: objects, lists and the leaves' types."""
    if isinstance(value, _Pairs):
        return ("object", [_skeleton(item) for _, item in value])
    if isinstance(value, list):
        return [_skeleton(item) for item in value]
    return type(value).__name__


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text(), lambda inner: st.lists(inner)
                    | st.dictionaries(st.text(min_size=1), inner), max_leaves=12),
       st.sampled_from([(",", ":"), (", ", " : ")]), st.booleans())
def test_json_names_hashed_keep_structure_length_and_map_one_to_one(document: object, separators: tuple[str, str],
                                                                    ascii_only: bool) -> None:
    text = json.dumps(document, separators=separators, ensure_ascii=ascii_only).encode()
    redactor = Redactor(b"salt", HASHED_NAMES)
    out = redactor.json(text)
    assert out is not None
    assert len(out) == len(text)
    # two short names may hash to one placeholder (documented), so objects are read as their pairs
    before, after = _parsed(text), _parsed(out)
    assert _skeleton(after) == _skeleton(before)
    names, hashed = _names(before), _names(after)
    assert len(hashed) == len(names)
    for name, placeholder in zip(names, hashed, strict=True):
        raw = json.dumps(name, ensure_ascii=ascii_only).encode()[1:-1]  # the name as the text spells it
        assert placeholder.encode() == redactor.field(raw)
        assert len(placeholder) == len(raw)


def test_a_json_name_gets_one_placeholder_in_every_document_and_path() -> None:
    redactor = Redactor(b"salt", HASHED_NAMES)
    one = redactor.json(b'{"customers": {"alice@example.com": {"email": "a"}}}')
    two = redactor.json(b'{"email": 1, "list": [{"email": null}]}')
    assert one is not None
    assert two is not None
    placeholder = redactor.field(b"email").decode()
    assert [name for name in _names(_parsed(one)) if len(name) == 5] == [placeholder]
    assert _names(_parsed(two)) == [placeholder, redactor.field(b"list").decode(), placeholder]
    for text in (one, two):
        assert b"alice" not in text
        assert b"email" not in text
    # a subdocument path names the same fields: the same placeholders, dots and indexes kept
    path = b"customers.email[2].list[-1]"
    assert redactor.path(path, 0) == b".".join(
        (redactor.field(b"customers"), redactor.field(b"email") + b"[2]", redactor.field(b"list") + b"[-1]"))
    # an xattr path's first name is the xattr's, kept as xattr names are
    assert redactor.path(b"_sync.rev", SubdocPathFlag.XATTR_PATH) == b"_sync." + redactor.field(b"rev")
    assert Redactor(b"salt").path(path, 0) == path


def test_json_names_are_kept_by_default_and_in_the_user_agent() -> None:
    document = b'{"email": "alice@example.com"}'
    out = Redactor(b"salt").json(document)
    assert out is not None
    assert list(json.loads(out)) == ["email"]
    hello = build.request(Opcode.HELLO, key=b'{"a":"my-app/1.0","i":"abc/def"}', features=[])
    assert b'"a":' in Redactor(b"salt", HASHED_NAMES).message(decode(hello))


def test_subdocument_paths_are_hashed_in_single_and_multi_path_requests() -> None:
    redactor = Redactor(b"salt", HASHED_NAMES)
    single = build.request(Opcode.SUBDOC_DICT_UPSERT, key=b"doc", value=b'address.city"Paris"', path_length=12,
                           subdoc_flags=0)
    out = decode(redactor.message(decode(single)))
    assert not out.diagnostics
    assert out.value[:12] == redactor.field(b"address") + b"." + redactor.field(b"city")
    assert b"Paris" not in out.value
    specs = b"".join(bytes([Opcode.SUBDOC_GET, flags]) + len(path).to_bytes(2, "big") + path
                     for flags, path in ((0, b"address.city"), (SubdocPathFlag.XATTR_PATH, b"_sync.rev")))
    multi = build.request(Opcode.SUBDOC_MULTI_LOOKUP, key=b"doc", value=specs)
    out = decode(redactor.message(decode(multi)))
    assert not out.diagnostics
    assert [spec["path"] for spec in out.field("lookup_specs")] == [
        (redactor.field(b"address") + b"." + redactor.field(b"city")).decode(),
        "_sync." + redactor.field(b"rev").decode()]
    kept = decode(Redactor(b"salt").message(decode(multi)))
    assert [spec["path"] for spec in kept.field("lookup_specs")] == ["address.city", "_sync.rev"]


HOSTILE_PATHS = {"a-name-then-a-bracket": b"a" * 65534 + b"]", "open-brackets": b"[" * 65535,
                 "unclosed-indexes": b"[1" * 32767, "dots": b"a." * 32767, "backquotes": b"`a.b`[0" * 9362}


@pytest.mark.parametrize("path", HOSTILE_PATHS.values(), ids=HOSTILE_PATHS.keys())
def test_a_hostile_path_of_the_largest_length_is_hashed_in_one_pass(path: bytes) -> None:
    # path_length is 16 bits; a matcher that backtracked over brackets would not finish these
    out = Redactor(b"salt", HASHED_NAMES).path(path, 0)
    assert len(out) == len(path)
    assert out != path
    assert out.count(b".") == path.count(b".")
    assert all(new == old or chr(new).isalnum() for new, old in zip(out, path, strict=True))


def test_kept_name_placeholders_are_bounded_and_stay_the_same() -> None:
    redactor = Redactor(b"salt", HASHED_NAMES)
    names = [f"field_{i}".encode() for i in range(FIELDS_KEPT + 100)]  # more than are kept: forgotten, remade
    first = [redactor.field(name) for name in names]
    again = [redactor.field(name) for name in reversed(names)][::-1]
    assert first == again == [Redactor(b"salt").placeholder(b"field", name) for name in names]
    assert len(redactor._fields) <= FIELDS_KEPT
    assert redactor.counts["json_names"] == 2 * len(names)
