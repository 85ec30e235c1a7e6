"""Customer data in the corners of the protocol: each case leaked through redact until it was found, so each
is held here by the bytes it must not leave (the core on one message, the engine on a crafted capture)."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import uuid
from pathlib import Path

from servekit import peer

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.protocol import build
from dcpctl.protocol.constants import DATATYPE_JSON, DATATYPE_SNAPPY, Opcode, Status
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.protocol.registry import DIALECTS
from dcpctl.protocol.value import snappy_compress, snappy_decompress
from dcpctl.redact.address import AddressMap
from dcpctl.redact.core import ByteStreamRedactor, Policy, Redactor
from dcpctl.render.env import Environment
from dcpctl.sources.pcapwriter import ACK, PSH, PcapWriter, TcpConversation, internet_checksum

SALT = b"a salt for the leak tests"
HEADER = struct.Struct("!BBHBBHIIQ")


def _packet(magic: int, opcode: int, *, key: bytes = b"", extras: bytes = b"", value: bytes = b"",
            datatype: int = 0, word: int = 0, framing: bytes = b"") -> bytes:
    """A packet as bytes, whatever its row allows (the encoder refuses shapes no row declares)."""
    if framing:
        header = struct.pack("!BBBBBBHIIQ", magic, opcode, len(framing), len(key), len(extras), datatype, word,
                             len(framing) + len(extras) + len(key) + len(value), 0, 0)
    else:
        header = HEADER.pack(magic, opcode, len(key), len(extras), datatype, word, len(extras) + len(key) + len(value),
                             0, 0)
    return header + framing + extras + key + value


def _redacted(raw: bytes, redactor: Redactor | None = None, collections: bool = False) -> bytes:
    out = (redactor or Redactor(SALT)).message(decode(raw, 0, DecodeOptions(collections=collections)))
    assert len(out) == len(raw) or redactor is not None
    return out


def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=160)
    return main(args, env), out.getvalue(), err.getvalue()


def _spec(opcode: int, path: bytes, value: bytes) -> bytes:
    return struct.pack("!BBHI", opcode, 0, len(path), len(value)) + path + value


def test_a_json_user_agent_keeps_nothing_of_its_text_over_many_connections() -> None:
    """Stars, not a placeholder compared with the text: no byte of the agent survives where it happens to
    equal the placeholder's, so no number of connections (each its own id) rebuilds it."""
    agent = "myapp-secretcustomername-prod7/uamarkerlowercase"
    for _ in range(300):
        key = json.dumps({"a": agent, "i": f"{uuid.uuid4().hex[:16]}/0000000000000001"}).encode()
        out = decode(_redacted(build.request(Opcode.HELLO, key=key, features=[])))
        document = json.loads(out.key)
        assert set(document) == {"a", "i"}
        assert set(document["a"] + document["i"]) == {"*"}, document


def test_records_after_the_first_that_does_not_parse_are_replaced() -> None:
    """A list of records read by its grammar stops at the first that does not parse (a value that is not UTF-8,
    a record cut short, bytes after the last): what follows was never read, so none of it stays."""
    cases = [
        _packet(0x80, Opcode.SUBDOC_MULTI_MUTATION, key=b"doc",
                value=_spec(0xC8, b"name", b'"Jos\xe9 SECRET-ONE"') + _spec(0xC8, b"card", b'"SECRET-TWO"')),
        _packet(0x80, Opcode.SUBDOC_MULTI_MUTATION, key=b"doc", value=_spec(0xC8, b"a", b'"x"') + b"SECRET-TAIL"),
        _packet(0x80, Opcode.OBSERVE, value=struct.pack("!HH", 0, 10) + b"SECRET-KEY" + struct.pack("!HH", 1, 50)
                + b"SECRET-CUT"),
        _packet(0x81, Opcode.SUBDOC_MULTI_LOOKUP, value=struct.pack("!HI", 0, 16) + b'"Caf\xe9 SECRET-V3"'),
    ]
    for raw in cases:
        out = _redacted(raw)
        assert b"SECRET" not in out, out
        assert out[:24] == raw[:24]


def test_values_a_server_compressed_are_redacted_inside() -> None:
    """HELLO SnappyEverywhere compresses any response value: a subdocument result, a range scan's keys.
    Snappy keeps text as literals, so a value passed through compressed would be readable."""
    lookup = struct.pack("!HI", 0, 32) + b'"SECRET-lookup-result-in-docum"'.ljust(32)
    keys = b"".join(bytes([len(key)]) + key for key in (b"SECRET-scan-key-1", b"SECRET-scan-key-2"))
    cases = [
        _packet(0x81, Opcode.SUBDOC_MULTI_LOOKUP, value=snappy_compress(lookup), datatype=DATATYPE_SNAPPY),
        _packet(0x81, Opcode.RANGE_SCAN_CONTINUE, extras=struct.pack("!I", 0), value=snappy_compress(keys),
                datatype=DATATYPE_SNAPPY, word=Status.RANGE_SCAN_MORE),
        _packet(0x81, Opcode.SUBDOC_GET, value=snappy_compress(b'"SECRET single path result"'),
                datatype=DATATYPE_SNAPPY | DATATYPE_JSON),
    ]
    for raw in cases:
        msg = decode(_redacted(raw, Redactor(SALT)))
        inflated = snappy_decompress(msg.value)
        assert isinstance(inflated, bytes), inflated
        assert b"SECRET" not in msg.raw
        assert b"SECRET" not in inflated
    version = _packet(0x81, Opcode.VERSION, value=snappy_compress(b"7.6.0-1234"), datatype=DATATYPE_SNAPPY)
    assert _redacted(version) == version  # protocol text stays, compressed as the server sent it


def test_a_stats_key_request_names_its_document_as_the_document_is_named() -> None:
    redactor = Redactor(SALT)
    mutation = build.request(Opcode.SET, key=b"customer::42", value=b"{}", flags=0, expiration=0)
    placeholder = decode(redactor.message(decode(mutation))).key
    for group, rest in ((b"key", b" 12"), (b"vkey", b" 7 _default.c1"), (b"key-byid", b" 7 8")):
        stat = build.request(Opcode.STAT, key=group + b" customer::42" + rest)
        out = decode(redactor.message(decode(stat)))
        assert out.key == group + b" " + placeholder + rest
    assert decode(redactor.message(decode(build.request(Opcode.STAT, key=b"dcp")))).key == b"dcp"


def test_values_where_no_row_declares_one_are_replaced() -> None:
    """A value on a message whose row declares none, and a success read as a failure's words (a GET answered
    without its flags): the protocol's text only where the protocol says so."""
    cases = [
        _packet(0x80, Opcode.GET, key=b"k1", value=b"SECRET-VALUE"),
        _packet(0x80, Opcode.DELETE, key=b"k1", value=b"SECRET-VALUE"),
        _packet(0x81, Opcode.SET, value=b"SECRET-VALUE"),
        _packet(0x81, Opcode.GET, value=b'{"a":"SECRET-VALUE"}', datatype=DATATYPE_JSON),
    ]
    for raw in cases:
        assert b"SECRET" not in _redacted(raw)
    error = _packet(0x81, Opcode.SET, value=b'{"error":{"context":"Invalid format"}}', datatype=DATATYPE_JSON,
                    word=Status.EINVAL)
    assert _redacted(error) == error  # a failure's words are the server's


def test_a_counters_value_is_a_documents_value() -> None:
    request = build.request(Opcode.INCREMENT, key=b"k", delta=3, initial=987654321, expiration=60)
    out = decode(_redacted(request))
    assert out.field("initial") != 987654321
    assert (out.field("delta"), out.field("expiration")) == (3, 60)
    response = build.response(Opcode.INCREMENT, value=struct.pack("!Q", 987654321))
    assert struct.pack("!Q", 987654321) not in _redacted(response)


def test_undeclared_extras_and_frame_infos_are_replaced() -> None:
    unknown = _packet(0x80, 0xEF, key=b"SECRET-K", extras=b"SECRET-EXTRAS", value=b"SECRET-V")
    assert b"SECRET" not in _redacted(unknown)
    framed = _packet(0x08, Opcode.GET, key=b"k", framing=bytes([0xF6, 0x10]) + b"SECRET")
    out = _redacted(framed)
    assert b"SECRET" not in out
    assert out[24:26] == framed[24:26]  # the element's id and length stay
    runs_past = _packet(0x08, Opcode.GET, key=b"k", framing=bytes([0x2F]) + b"SECRET")
    assert b"SECRET" not in _redacted(runs_past)
    stream_id = build.request(Opcode.DCP_NOOP, stream_id=7)
    assert _redacted(stream_id) == stream_id  # a declared frame info is the protocol's


def test_a_message_after_skipped_bytes_keeps_only_its_numbers() -> None:
    """Found by resynchronising (a capture begun inside a document): a well-formed STAT response inside a
    binary value is a document's bytes, so its text goes whatever its row says."""
    fake = _packet(0x81, Opcode.STAT, key=b"SECRET-CARD", value=b"4111-1111-1111-1111 SECRET-HOLDER")
    redactor = ByteStreamRedactor(Redactor(SALT))
    options = DecodeOptions()
    out = redactor.feed(b"\x01" * 7 + fake, options)
    assert out[:7] == bytes(7)
    assert out[7:7 + 24] == fake[:24]
    assert b"SECRET" not in out
    assert b"4111" not in out
    noop = build.request(Opcode.DCP_NOOP)
    assert redactor.feed(noop, options) == noop  # nothing but numbers: the same bytes


def test_an_engine_capture_leaves_no_trailer_and_no_text_after_a_skip(tmp_path: Path) -> None:
    out = io.BytesIO()
    writer = PcapWriter(out)
    conversation = TcpConversation(writer, client=("10.0.0.1", 41000), server=("10.0.0.2", 11210))
    conversation.handshake()
    hello = build.request(Opcode.HELLO, key=b"agent", features=[])
    # an Ethernet trailer after the datagram (padding that held another packet's bytes)
    frame = conversation._frame(True, conversation.next[True], conversation.next[False], PSH | ACK, hello)
    writer.write(1_700_000_001.0, frame + b"SECRET-TRAILER")
    conversation.next[True] += len(hello)
    # a capture that missed the start of a mutation whose binary value holds a well-formed STAT response
    fake = _packet(0x81, Opcode.STAT, key=b"SECRET-CARD", value=b"SECRET-HOLDER")
    mutation = build.request(Opcode.DCP_MUTATION, key=b"doc", value=b"\x00blob:" + fake + b"tail", by_seqno=1,
                             rev_seqno=1, flags=0, expiration=0, lock_time=0, nmeta=0, nru=0)
    conversation.skip(False, 40)
    conversation.send(False, mutation[40:] + build.request(Opcode.DCP_NOOP))
    conversation.close()
    source, target, salt = tmp_path / "in.pcap", tmp_path / "out.pcap", tmp_path / "salt"
    source.write_bytes(out.getvalue())
    salt.write_text("00" * 16)
    code, _, err = _run(["redact", str(source), "-o", str(target), "--salt-file", str(salt)])
    assert code == ExitCode.OK, err
    assert source.read_bytes().count(b"SECRET") == 3
    assert b"SECRET" not in target.read_bytes()
    # the response found inside the value, and the noop found after the value's tail
    assert "only their header and extras kept: 2" in err



def _mutation(key: bytes, value: bytes, seqno: int) -> bytes:
    return build.request(Opcode.DCP_MUTATION, key=key, value=value, by_seqno=seqno, rev_seqno=1, flags=0,
                         expiration=0, lock_time=0, nmeta=0, nru=0)


def _redact_capture(tmp_path: Path, capture: bytes, *options: str) -> bytes:
    """``capture`` redacted through the command (one process, then two: the output must not depend on it)."""
    source, salt = tmp_path / "in.pcap", tmp_path / "salt"
    source.write_bytes(capture)
    salt.write_text("00" * 16)
    outputs = []
    for jobs in ("1", "2"):
        target = tmp_path / f"out{jobs}.pcap"
        code, _, err = _run(["redact", str(source), "-o", str(target), "--salt-file", str(salt), "--jobs", jobs,
                             *options])
        assert code == ExitCode.OK, err
        outputs.append(target.read_bytes())
    assert outputs[0] == outputs[1]
    return outputs[0]


def test_headers_a_crafted_document_holds_cannot_keep_the_messages_after_a_gap(tmp_path: Path) -> None:
    """A document ending in a fake NOOP answer and a fake error header, and a segment of it lost: after the
    gap the first fake is untrusted, and the second's body length swallows the next real mutation, whose key
    and value an error body's row would keep as the server's words. From a skip on, no row keeps text."""
    victim = _mutation(b"SECRETKEY-VICTIM", b'{"iban":"SECRETVAL-VICTIM"}', 11)
    fake_error = HEADER.pack(0x81, Opcode.GET, 0, 0, 0, Status.KEY_ENOENT, len(victim), 0, 0)
    assert b"SECRET" not in _redact_capture(tmp_path, _behind_a_gap(fake_error, victim))


def test_a_frame_the_snap_length_cut_is_a_skip_as_a_gap_is(tmp_path: Path) -> None:
    """After a frame cut by the snap length the framer starts again unsynchronised: the message it finds
    first is untrusted, as after a gap (a fake error header there swallowed the real mutation after it)."""
    victim = _mutation(b"SECRETKEY-SNAP", b'{"x":"SECRETVAL-SNAP"}', 11)
    fake_error = HEADER.pack(0x81, Opcode.GET, 0, 0, 0, Status.KEY_ENOENT, len(victim), 0, 0)
    attacker = _mutation(b"attacker-doc", b"A" * 300 + fake_error, 10)
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out, snaplen=200))
    conversation.handshake()
    conversation.segment(False, build.request(Opcode.DCP_NOOP))
    conversation.segment(False, attacker[:-len(fake_error)])  # cut by the snap length
    conversation.segment(False, fake_error + victim)
    conversation.close()
    assert out.getvalue().count(b"SECRET") == 2
    assert b"SECRET" not in _redact_capture(tmp_path, out.getvalue())


def test_the_answers_of_a_private_stat_group_lose_their_values(tmp_path: Path) -> None:
    """cbstats raw "_hash-dump 0": kv_engine prints each item's key and the start of its value there."""
    dump = (b'SV @0x7f00 seq:12 rev:1 key:"\x00SECRETKEY-HD" exp:0 vallen:27 :"{\\"ssn\\":\\"SECRETVAL-HD\\"}"\n')
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    conversation.send(True, build.request(Opcode.STAT, key=b"_hash-dump 0", opaque=7))
    conversation.send(False, _packet(0x81, Opcode.STAT, key=b"vb_0", value=dump)[:12] + struct.pack("!I", 7)
                      + bytes(8) + b"vb_0" + dump)
    conversation.send(False, build.response(Opcode.STAT, opaque=7))
    conversation.send(True, build.request(Opcode.STAT, key=b"vbucket-seqno", opaque=8))
    conversation.send(False, _packet(0x81, Opcode.STAT, key=b"vb_0:high_seqno", value=b"12")[:12]
                      + struct.pack("!I", 8) + bytes(8) + b"vb_0:high_seqno12")
    conversation.close()
    redacted = _redact_capture(tmp_path, out.getvalue())
    assert b"SECRET" not in redacted
    assert b"_hash-dump 0" in redacted
    assert b"vb_0:high_seqno12" in redacted  # a public group's answer is the protocol's words


def test_an_authenticate_challenge_is_a_secret() -> None:
    """ns_server's Authenticate carries the client's SASL message (PLAIN: the password): stars, as SASL's."""
    challenge = b'{"mechanism":"PLAIN","challenge":"AGpvZQBUcjB1YjRkb3ImMw=="}'
    raw = _packet(0x82, 0x02, value=challenge, datatype=DATATYPE_JSON)
    out = _redacted(raw)
    assert out[24:] == b"*" * len(challenge)


def test_malformed_messages_of_declared_opcodes_keep_nothing_of_their_body() -> None:
    """Extras of a length no row of the opcode declares, a range scan's data read as an error body, a stream
    request's filter that is not JSON: nothing says these bytes are the protocol's."""
    odd_extras = _packet(0x80, Opcode.SET, key=b"k", extras=b"SECRET-EXTRAS", value=b"v")
    assert b"SECRET" not in _redacted(odd_extras)
    counter = _packet(0x80, Opcode.INCREMENT, key=b"k", extras=struct.pack("!QQI", 1, 0, 0) + b"SECRET42")
    assert b"SECRET" not in _redacted(counter)
    scan = HEADER.pack(0x81, Opcode.RANGE_SCAN_CONTINUE, 0, 0, 0, Status.RANGE_SCAN_MORE, 14, 0, 0) + b"SECRET-RSC-KEY"
    assert b"SECRET" not in _redacted(scan)
    not_json = _packet(0x80, Opcode.DCP_STREAM_REQ, extras=struct.pack("!IIQQQQQ", 0, 0, 0, 1, 0, 0, 0),
                       value=b"SECRET-FILTER")
    assert b"SECRET" not in _redacted(not_json, collections=True)


def test_frame_infos_keep_only_the_protocols_data() -> None:
    """Known ids at lengths they do not take, and the retired tracing context's free text, are replaced; a
    stream id, a durability requirement and a response's duration are the protocol's."""
    for framing in (bytes([0x0A]) + b"SECRET-BAR", bytes([0x1A]) + b"SECRET-DUR", bytes([0x3A]) + b"SECRET-TRC"):
        assert b"SECRET" not in _redacted(_packet(0x08, Opcode.GET, key=b"k", framing=framing)), framing
    kept = _packet(0x08, Opcode.SET, key=b"k", extras=bytes(8), value=b"v", framing=bytes([0x13, 1, 0, 10]))
    assert _redacted(kept)[24:28] == kept[24:28]
    answer = _packet(0x18, Opcode.GET, extras=bytes(4), framing=bytes([0x02, 0, 9]))
    assert _redacted(answer)[24:27] == answer[24:27]
    wrong = _packet(0x18, Opcode.GET, extras=bytes(4), framing=bytes([0x0A]) + b"SECRET-RES")
    assert b"SECRET" not in _redacted(wrong)


def test_a_connection_begun_before_the_capture_is_not_taken_for_tls(tmp_path: Path) -> None:
    """Its first captured bytes (a binary value's tail) may read as a TLS hello: a hello opens a connection,
    so they are not looked at for one, and --keep-unparsed keeps nothing of its messages in clear."""
    tail = bytes([0x16, 0x03, 0x03, 0x00, 0x40, 0x02]) + bytes(30)
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))  # no handshake
    conversation.segment(False, tail + _mutation(b"SECRETKEY-TLS", b'{"card":"SECRETVAL-TLS"}', 9))
    conversation.segment(True, build.request(Opcode.GET, key=b"SECRETKEY-GET"))
    assert out.getvalue().count(b"SECRET") == 3
    assert b"SECRET" not in _redact_capture(tmp_path, out.getvalue(), "--keep-unparsed")


def _ipv4_checksummed(frame: bytearray) -> bytes:
    frame[24:26] = bytes(2)
    frame[24:26] = struct.pack("!H", internet_checksum(bytes(frame[14:14 + frame[14] % 16 * 4])))
    return bytes(frame)


def test_no_trailer_survives_a_tcp_header_longer_than_its_datagram(tmp_path: Path) -> None:
    """A data offset of 60 bytes in a 40-byte datagram: the bytes after the datagram are a trailer, zeroed,
    though the TCP header claims them."""
    out = io.BytesIO()
    writer = PcapWriter(out)
    conversation = TcpConversation(writer, client=("10.0.0.1", 41000), server=("10.0.0.2", 11210))
    conversation.handshake()
    conversation.send(True, build.request(Opcode.NOOP))
    ack = bytearray(conversation._frame(False, conversation.next[False], conversation.next[True], ACK, b""))
    ack[46] = 0xF0 | ack[46] % 16  # data offset 15 words
    writer.write(1_700_000_001.0, bytes(ack) + b"SECRET-TRAILER" + bytes(40))
    conversation.close()
    assert b"SECRET" not in _redact_capture(tmp_path, out.getvalue(), "--keep-unparsed")


def test_mapped_addresses_leave_none_in_ip_options(tmp_path: Path) -> None:
    """--map-addresses: a recorded route in an IPv4 header's options holds addresses too: zeroed."""
    out = io.BytesIO()
    writer = PcapWriter(out)
    conversation = TcpConversation(writer, client=("10.9.8.7", 41000), server=("10.9.8.5", 11210))
    conversation.handshake()
    payload = build.request(Opcode.NOOP)
    frame = bytearray(conversation._frame(True, conversation.next[True], conversation.next[False], PSH | ACK,
                                          payload))
    route = bytes([7, 11, 12]) + bytes([10, 9, 8, 7]) + bytes([10, 9, 8, 5]) + bytes(1)  # a record route, padded
    frame[34:34] = route
    frame[14] = 0x40 | (20 + len(route)) // 4
    frame[16:18] = struct.pack("!H", struct.unpack_from("!H", frame, 16)[0] + len(route))
    writer.write(1_700_000_001.0, _ipv4_checksummed(frame))
    conversation.next[True] += len(payload)
    conversation.close()
    redacted = _redact_capture(tmp_path, out.getvalue(), "--map-addresses")
    assert bytes([10, 9, 8, 7]) not in redacted
    assert bytes([10, 9, 8, 5]) not in redacted


def _behind_a_gap(fakes: bytes, victim: bytes, after: bytes = b"") -> bytes:
    """A capture that lost a segment inside an attacker's document ending in ``fakes`` (headers made to be
    found when the framer resynchronises), then the real ``victim`` message and ``after``."""
    fake_noop = _packet(0x81, Opcode.NOOP)  # the first found: untrusted
    attacker = _mutation(b"attacker-doc", bytes(40) + fake_noop + fakes, 10)
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    conversation.segment(False, build.request(Opcode.DCP_NOOP))
    cut = len(attacker) - len(fake_noop) - len(fakes) - 20
    conversation.skip(False, cut)
    conversation.segment(False, attacker[cut:])
    conversation.segment(False, victim)
    if after:
        conversation.segment(False, after)
    conversation.close()
    assert out.getvalue().count(b"SECRET") == 2
    return out.getvalue()


def test_after_a_gap_no_extras_and_no_frame_info_keeps_what_follows(tmp_path: Path) -> None:
    """Behind the untrusted first fake: a header of an unknown opcode whose 255 bytes of extras swallow the
    next real mutation, or a noop whose one frame info (a privilege name, 253 bytes) does."""
    victim = _mutation(b"SECRETKEY-VICTIM", b'{"iban":"SECRETVAL-VICTIM"}', 11)
    noops = build.request(Opcode.DCP_NOOP) * 20
    extras = HEADER.pack(0x81, 0xEE, 0, 255, 0, 0, 255, 0, 0) + bytes(10)
    assert b"SECRET" not in _redact_capture(tmp_path, _behind_a_gap(extras, victim, noops))
    privilege = struct.pack("!BBBBBBHIIQ", 0x08, Opcode.DCP_NOOP, 255, 0, 0, 0, 0, 255, 0, 0) + bytes([0x6F, 238])
    assert b"SECRET" not in _redact_capture(tmp_path, _behind_a_gap(privilege, victim, noops))


def test_a_side_whose_syn_the_capture_missed_is_followed_as_if_begun_before_it(tmp_path: Path) -> None:
    """The client's SYN captured, the server's SYN-ACK and first bytes lost: the server's first bytes seen
    are not its first (here a fake error header in a document, swallowing the next mutation)."""
    victim = _mutation(b"SECRETKEY-SYNACK", b'{"iban":"SECRETVAL-SYNACK"}', 11)
    fake = HEADER.pack(0x81, Opcode.GET, 0, 0, 0, Status.KEY_ENOENT, len(victim), 0, 0)
    attacker = _mutation(b"attacker-doc", b"A" * 1400 + fake, 10)
    out = io.BytesIO()
    writer = PcapWriter(out)
    conversation = TcpConversation(writer)
    client, server = conversation.isn[True], conversation.isn[False]
    writer.write(1_700_000_000.0, conversation._frame(True, client, 0, 0x02, b""))  # the SYN alone
    writer.write(1_700_000_000.1, conversation._frame(True, client + 1, server + 1, ACK, b""))
    conversation.next[True] = client + 1
    conversation.next[False] = server + 1
    conversation.segment(True, build.request(Opcode.HELLO, key=b"agent", features=[]))
    conversation.skip(False, len(attacker) - len(fake))
    conversation.segment(False, attacker[-len(fake):])
    conversation.segment(False, victim)
    conversation.segment(False, build.request(Opcode.DCP_NOOP))
    conversation.close()
    assert out.getvalue().count(b"SECRET") == 2
    assert b"SECRET" not in _redact_capture(tmp_path, out.getvalue())


def _stat_answer(opaque: int, key: bytes = b"", value: bytes = b"") -> bytes:
    return HEADER.pack(0x81, Opcode.STAT, len(key), 0, 0, 0, len(key) + len(value), opaque, 0) + key + value


def test_stat_answers_keep_their_text_only_when_their_public_request_was_seen(tmp_path: Path) -> None:
    """kv_engine prints keys in _hash-dump and range-scans answers. An answer whose request the capture does
    not show (lost, captured after it, found after a skip), or shares its opaque with a private one, keeps no
    value; a seen public group's answers keep theirs."""
    dump = b'SV seq:12 key:"\x00SECRETKEY-HD" vallen:27 :"{\\"ssn\\":\\"SECRETVAL-HD\\"}"\n'
    request = build.request(Opcode.STAT, key=b"_hash-dump 0", opaque=7)
    answers = _stat_answer(7, b"_hash-dump", dump) + _stat_answer(7)

    def capture(steps: list[tuple[bool, bytes, int | None]]) -> bytes:
        out = io.BytesIO()
        conversation = TcpConversation(PcapWriter(out))
        conversation.handshake()
        for from_client, data, offset in steps:
            if offset is None:
                conversation.send(from_client, data)
            elif offset < 0:
                conversation.skip(from_client, len(data))
            else:
                conversation.segment(from_client, data, offset=offset)
        conversation.send(True, build.request(Opcode.NOOP))
        conversation.close()
        return out.getvalue()

    lost = capture([(True, request, -1), (False, answers, None)])
    later = capture([(False, answers, None), (True, request, 0)])
    pipelined = capture([(True, request + build.request(Opcode.STAT, key=b"_hash-dump 1", opaque=7), None),
                         (False, _stat_answer(7, b"_hash-dump", b"x" * 20) + _stat_answer(7) + answers, None)])
    behind = capture([(True, b"\x01" * 50, -1), (True, request, None), (False, answers, None)])
    scans = capture([(True, build.request(Opcode.STAT, key=b"range-scans", opaque=4), None),
                     (False, _stat_answer(4, b"vb_0:5cd8:start", b"cid:0x8:SECRETKEY-RS") + _stat_answer(4), None)])
    for name, made in (("lost", lost), ("later", later), ("pipelined", pipelined), ("behind", behind),
                       ("range-scans", scans)):
        assert b"SECRET" in made, name
        assert b"SECRET" not in _redact_capture(tmp_path, made), name
    public = capture([(True, build.request(Opcode.STAT, key=b"vbucket-seqno", opaque=8), None),
                      (False, _stat_answer(8, b"vb_0:high_seqno", b"12") + _stat_answer(8), None)])
    assert b"vb_0:high_seqno12" in _redact_capture(tmp_path, public)


def test_keys_in_declared_values_are_keys_even_when_they_look_like_json() -> None:
    key = b'{"SECRETKEY-JSON@example.com":1}'
    observe = _packet(0x80, Opcode.OBSERVE, value=struct.pack("!HH", 0, len(key)) + key)
    assert b"SECRET" not in _redacted(observe)
    get = _packet(0x80, Opcode.GET, key=key)
    assert _redacted(observe)[-len(key):] == _redacted(get)[-len(key):]  # the same placeholder as elsewhere


def test_a_numbers_exponent_digits_are_replaced_too() -> None:
    document = b'{"a":0E987654321,"b":-0.0e-31415926}'  # JSON that parses: any run of exponent digits
    out = Redactor(SALT).json(document)
    assert out is not None
    assert b"987654321" not in out
    assert b"31415926" not in out
    assert out[6:7] == b"E"
    assert out[25:27] == b"e-"
    assert json.loads(out).keys() == {"a", "b"}


def test_stat_groups_that_print_agents_packets_or_keys_lose_their_values(tmp_path: Path) -> None:
    """kv_engine's "connections" answers hold each client's HELLO agent and the packets in flight (keys),
    "tasks" a key in a background fetch's description: only the groups known to hold the protocol's words
    keep their answers' text."""
    agent = b'{"agent_name":"SECRET-AGENT/1.0","cookies":[{"packet":{"key":"<ud>SECRET-KEY</ud>"}}]}'
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    for opaque, group, value in ((3, b"connections", agent), (4, b"tasks", b"vkey stat: key{SECRET-TASK}")):
        conversation.send(True, build.request(Opcode.STAT, key=group, opaque=opaque))
        conversation.send(False, _stat_answer(opaque, b"0", value) + _stat_answer(opaque))
    conversation.close()
    assert out.getvalue().count(b"SECRET") == 3
    assert b"SECRET" not in _redact_capture(tmp_path, out.getvalue())


def test_a_not_my_vbucket_answers_cluster_map_is_a_cluster_map() -> None:
    """kv_engine answers NotMyVbucket with the bucket's cluster map: --hash-names and --map-addresses treat
    its names and host names as a GET_CLUSTER_CONFIG answer's."""
    cluster_map = json.dumps({"rev": 1, "name": "SECRETBUCKET", "nodesExt": [
        {"services": {"kv": 11210}, "hostname": "node1.SECRETCORP.example"}]}).encode()
    answer = HEADER.pack(0x81, Opcode.GET, 0, 0, DATATYPE_JSON, Status.NOT_MY_VBUCKET, len(cluster_map), 0, 0) \
        + cluster_map
    named = _redacted(answer, Redactor(SALT, Policy(hash_names=True)))
    assert b"SECRETBUCKET" not in named
    assert json.loads(named[24:]).keys() == {"rev", "name", "nodesExt"}
    mapped = _redacted(answer, Redactor(SALT, addresses=AddressMap(SALT)))  # host names: --map-addresses's
    assert b"SECRETCORP" not in mapped


def test_a_stack_of_vlan_tags_hides_nothing_from_the_frames_rewriting(tmp_path: Path) -> None:
    """Thirteen 802.1Q tags: the trailer is still zeroed, the addresses mapped and the checksum recomputed
    (the checksum over the original bytes would let a guess at them be tested)."""
    out = io.BytesIO()
    writer = PcapWriter(out)
    conversation = TcpConversation(writer, client=("10.1.2.3", 41000), server=("10.9.8.7", 11210))
    conversation.handshake()
    payload = build.request(Opcode.SET, key=b"SECRET-KEY", value=b"SECRET-VALUE", flags=0, expiration=0)
    frame = conversation._frame(True, conversation.next[True], conversation.next[False], PSH | ACK, payload)
    tagged = frame[:12] + struct.pack("!HH", 0x8100, 5) * 13 + frame[12:] + b"SECRET-TRAILER"
    writer.write(1_700_000_001.0, tagged)
    conversation.next[True] += len(payload)
    conversation.close()
    redacted = _redact_capture(tmp_path, out.getvalue(), "--map-addresses")
    assert b"SECRET" not in redacted
    assert bytes([10, 1, 2, 3]) not in redacted
    assert bytes([10, 9, 8, 7]) not in redacted
    target = tmp_path / "checked.pcap"
    target.write_bytes(redacted)
    statuses = subprocess.run([peer("tshark"), "-r", str(target), "-o", "tcp.check_checksum:TRUE", "-T", "fields",
                               "-e", "tcp.checksum.status"], capture_output=True, text=True, check=True, timeout=60)
    assert set(statuses.stdout.split()) == {"1"}  # every TCP checksum good


def test_the_upr_drafts_layout_read_past_its_headers_extras_is_not_kept() -> None:
    """The draft's stream messages are read by their 24-byte layout whatever the header says: with fewer
    extras in the header, those bytes are, by the header, the key and the value."""
    body = b"SECRET-UPR-KEY" + b"SECRET-UPR-VALUE-and-more"
    raw = HEADER.pack(0x81, 0x04, 14, 0, 3, 0, len(body), 7, 0) + body
    out = Redactor(SALT).message(decode(raw, 0, DecodeOptions(DIALECTS["upr-draft"])))
    assert b"SECRET" not in out


def test_names_hashed_word_by_word_take_every_letter_of_a_non_ascii_name() -> None:
    user = "^李雷.josé".encode()
    impersonating = _packet(0x08, Opcode.GET, key=b"k", framing=bytes([0x40 | len(user)]) + user)
    out = _redacted(impersonating, Redactor(SALT, Policy(hash_names=True)))
    assert "李".encode() not in out
    assert "é".encode() not in out
    assert out[25:26] == b"^"  # the external user's mark and the separators stay


def test_a_hello_the_capture_shows_wins_over_collections(tmp_path: Path) -> None:
    """--collections stands for a negotiation the capture does not show: where it shows a HELLO without
    Collections, a key's first byte is not taken for a collection id (and kept)."""
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    conversation.send(True, build.request(Opcode.HELLO, key=b"agent", features=[]))
    conversation.send(False, build.response(Opcode.HELLO, features=[]))
    conversation.send(True, build.request(Opcode.SET, key=b"Zsecret-key", value=b"v", flags=0, expiration=0))
    conversation.close()
    assert _redact_capture(tmp_path, out.getvalue(), "--collections") == _redact_capture(tmp_path, out.getvalue())


def test_tcp_options_that_sign_or_sum_the_payload_are_zeroed(tmp_path: Path) -> None:
    """A TCP-MD5 or TCP-AO signature and an MPTCP data checksum cover the original payload: each would let a
    guess at the bytes replaced be tested. Their data is zeroed; timestamps stay, and the checksum is good."""
    signature, checksum = bytes(range(160, 176)), bytes([0xA2, 0x3C])
    timestamps = bytes([1, 1, 8, 10]) + struct.pack("!II", 123456, 654321)
    md5 = bytes([19, 18]) + signature + bytes([1, 1])
    dss = bytes([30, 16, 0x20, 0x04]) + struct.pack("!IIH", 5000, 1, 56) + checksum
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    for options in (md5, dss + timestamps):
        conversation.segment(True, build.request(Opcode.SET, key=b"SECRET-KEY", value=b"SECRET-VALUE", flags=0,
                                                 expiration=0), options=options)
    conversation.close()
    redacted = _redact_capture(tmp_path, out.getvalue())
    assert signature not in redacted
    assert struct.pack("!IH", 1, 56) + checksum not in redacted
    assert timestamps in redacted
    target = tmp_path / "checked.pcap"
    target.write_bytes(redacted)
    statuses = subprocess.run([peer("tshark"), "-r", str(target), "-o", "tcp.check_checksum:TRUE", "-T", "fields",
                               "-e", "tcp.checksum.status"], capture_output=True, text=True, check=True, timeout=60)
    assert set(statuses.stdout.split()) == {"1"}
