"""The official Python SDK's own traffic, captured on loopback by Wireshark's dumpcap while it works against
``dcpctl serve``, decoded by ``dcpctl decode`` and held to tshark frame by frame: every message read with no
finding but the masked SASL exchange, and where tshark disagrees, the reason it is wrong."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import couchbase.subdocument as sd
import pytest
from couchbase.auth import PasswordAuthenticator
from couchbase.cluster import Cluster
from couchbase.durability import DurabilityLevel, ServerDurability
from couchbase.exceptions import DocumentNotFoundException
from couchbase.options import ClusterOptions, ClusterTimeoutOptions, UpsertOptions
from servekit import Server, peer, serving

from dcpctl.protocol.constants import Opcode, Status

pytestmark = pytest.mark.peer

FIELDS = ["frame.number", "couchbase.opcode", "couchbase.status", "couchbase.extras.flags",
          "couchbase.key.logical_key", "couchbase.flex_frame.frame.durability_req", "_ws.expert.message"]
# What tshark says of this traffic that is not so, and why (Wireshark 4.0's couchbase dissector):
WIRESHARK_IS_WRONG = {
    # it reads a collection-prefixed key as a string field first, finds bytes left over, then decodes the
    # collection id and the logical key after all (both agree with dcpctl's)
    "Trailing stray characters": "key",
    # with HELLO MutationSeqno a mutation's response carries the 16-byte mutation token (vbucket uuid and
    # seqno); it knows that for SET and DELETE but not for the subdocument mutation
    "Illegal Extras length, should be 0": "mutation token",
    # an error response carries the status and maybe a text, never a GET's flags or a value
    "Get Response must have Extras": "error body",
    "Get with status Key not found (0x1) must have Value": "error body",
}
# What tshark rightly notes (its expert notes on statuses), not a disagreement.
WIRESHARK_NOTES = frozenset({"SASL Authenticate: Authentication continue", "Get: Key not found"})
DUMPCAP_START = 15.0  # seconds for dumpcap to say it is capturing
# dumpcap says so a moment before its filter sees packets: on a loaded machine the SDK's first connection
# was missed without this wait
DUMPCAP_SETTLE = 1.0



def _capture_on_loopback(port: int, out: Path) -> subprocess.Popen[str]:
    if os.geteuid() != 0:
        pytest.skip("capturing on lo needs root (or CAP_NET_RAW for dumpcap)")
    process = subprocess.Popen([peer("dumpcap"), "-i", "lo", "-f", f"tcp port {port}", "-w", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    deadline = time.monotonic() + DUMPCAP_START
    while time.monotonic() < deadline:  # dumpcap says "Capturing on 'Loopback: lo'" once the filter is set
        line = process.stderr.readline()
        if "Capturing on" in line or not line:
            break
    assert process.poll() is None, "dumpcap did not start"
    time.sleep(DUMPCAP_SETTLE)
    return process


def _sdk_session(port: int) -> None:
    """What an application does: writes, reads, a CAS replace, subdocument, a durable write, a miss, a delete."""
    timeouts = ClusterTimeoutOptions(kv_timeout=timedelta(seconds=5), connect_timeout=timedelta(seconds=10))
    cluster = Cluster(f"couchbase://127.0.0.1:{port}",
                      ClusterOptions(PasswordAuthenticator("Administrator", "password"), timeout_options=timeouts))
    cluster.wait_until_ready(timedelta(seconds=10))
    collection = cluster.bucket("default").default_collection()
    collection.upsert("k1", {"a": 1, "b": [1]})
    collection.replace("k1", {"a": 2, "b": [1]}, cas=collection.get("k1").cas)
    collection.lookup_in("k1", [sd.get("a"), sd.exists("b")])
    collection.mutate_in("k1", [sd.upsert("c", 3), sd.array_append("b", 2)])
    collection.upsert("k2", "x" * 2000, UpsertOptions(durability=ServerDurability(DurabilityLevel.MAJORITY)))
    with pytest.raises(DocumentNotFoundException):
        collection.get("nope")
    collection.remove("k1")
    cluster.ping()
    cluster.close()


def _tshark(capture: Path, port: int) -> dict[int, dict[str, list[str]]]:
    done = subprocess.run([peer("tshark"), "-r", str(capture), "-d", f"tcp.port=={port},couchbase", "-Y",
                           "couchbase", "-T", "fields", "-E", "separator=\t", "-E", "aggregator=|",
                           *[x for f in FIELDS for x in ("-e", f)]],
                          capture_output=True, text=True, check=True, timeout=120)
    rows = {}
    for line in done.stdout.splitlines():
        cells = line.split("\t")
        rows[int(cells[0])] = {f: [v for v in c.split("|") if v] for f, c in zip(FIELDS[1:], cells[1:], strict=True)}
    return rows


def _decode(capture: Path, port: int) -> dict[int, list[dict[str, Any]]]:
    done = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "--port", str(port), "-F", "jsonl",
                           str(capture)], capture_output=True, text=True, check=True, timeout=120)
    by_frame: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for record in map(json.loads, done.stdout.splitlines()):
        by_frame[record["frames"][-1]].append(record)  # tshark shows a message in the frame that completes it
    return by_frame


def _statuses(records: list[dict[str, Any]]) -> list[str]:
    """Each response's status, then its subdocument results' (tshark shows both as couchbase.status)."""
    out = []
    for record in records:
        if "status" in record:
            out.append(record["status"])
            out += [result["status"] for name, results in record.items()
                    if name.endswith("_results") for result in results]
    return out


def _hex(text: str) -> int:
    return int(text, 16) if text.startswith("0x") else int(text)


@pytest.fixture
def server() -> Any:
    with serving() as running:
        yield running


def test_the_sdks_traffic_decodes_as_tshark_reads_it(server: Server, tmp_path: Path) -> None:
    capture = tmp_path / "sdk.pcapng"
    dumpcap = _capture_on_loopback(server.port, capture)
    try:
        _sdk_session(server.port)
        time.sleep(0.5)  # the last segments reach the capture
    finally:
        dumpcap.send_signal(signal.SIGINT)
        dumpcap.communicate(timeout=30)  # and closes its pipe
    theirs, mine = _tshark(capture, server.port), _decode(capture, server.port)

    records = [r for frame in mine.values() for r in frame]
    opcodes = {r["opcode"] for r in records}
    assert {"HELLO", "SASL_AUTH", "SELECT_BUCKET", "GET_CLUSTER_CONFIG", "SET", "GET", "REPLACE",
            "SUBDOC_MULTI_LOOKUP", "SUBDOC_MULTI_MUTATION", "DELETE", "NOOP"} <= opcodes
    assert not [o for o in opcodes if o.startswith("0x")], opcodes  # every opcode named
    findings = [(r["opcode"], d["name"]) for r in records for d in r["diagnostics"]]
    assert {name for _, name in findings} <= {"redacted"}, findings  # the SASL exchange, masked
    assert any(r.get("frame_infos", [{}])[0].get("durability_level") for r in records if r["opcode"] == "SET")

    assert sorted(theirs) == sorted(mine)
    compared = 0
    for frame, row in theirs.items():
        here = mine[frame]
        assert [_hex(o) for o in row["couchbase.opcode"]] == [int(Opcode[r["opcode"]]) for r in here], frame
        assert [Status(_hex(s)).kv_name for s in row["couchbase.status"]] == _statuses(here), frame
        assert sorted(_hex(f) for f in row["couchbase.extras.flags"]) == \
            sorted(r["flags"] for r in here if isinstance(r.get("flags"), int)), frame
        assert sorted(row["couchbase.key.logical_key"]) == \
            sorted(r["key"] for r in here if "collection_id" in r), frame
        levels = [int(level) for level in row["couchbase.flex_frame.frame.durability_req"]]
        assert levels == [i["durability_level"] for r in here for i in r.get("frame_infos", ())
                          if "durability_level" in i], frame
        compared += len(row["couchbase.opcode"])
        for message in row["_ws.expert.message"]:
            if message in WIRESHARK_NOTES:
                continue
            assert message in WIRESHARK_IS_WRONG, (frame, message)
            if WIRESHARK_IS_WRONG[message] == "mutation token":
                assert any(r["opcode"] == "SUBDOC_MULTI_MUTATION" and "mutation_seqno" in r for r in here)
            if WIRESHARK_IS_WRONG[message] == "error body":
                assert any(r.get("status") == "KeyEnoent" and "flags" not in r for r in here)
    # every message compared, and the session whole: two bootstraps (12 and 14 messages), 8 operations, a ping
    assert compared == len(records) >= 44
