"""Pretty output for people: ISO-8601 times, named special values, wrapped lines under their first column.
JSON output stays as the contract has it."""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

from dcpctl.cli import app, main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment
from dcpctl.render.pretty import iso_time

ROOT = Path(__file__).resolve().parents[2]
PCAP = ROOT / "samples" / "dcp-session.pcap"
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z ")


def run(args: list[str], *, stdin: bytes = b"", tty: bool = False, width: int | None = 160,
        color: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(stdin), stdout_isatty=tty, stderr_isatty=False,
                      color=color, width=width)
    return main(args, env), out.getvalue(), err.getvalue()


@pytest.fixture
def india() -> Iterator[None]:
    """The process's local zone is UTC+05:30 (no daylight saving: the offset is the same all year)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "Asia/Kolkata")
        time.tzset()
        yield
    time.tzset()


def test_ts_is_iso_8601_utc_in_pretty_output_and_epoch_seconds_in_json() -> None:
    code, out, _ = run(["decode", "-F", "pretty", str(PCAP)])
    assert code == ExitCode.OK
    headlines = [line for line in out.splitlines() if not line.startswith(" ")]
    assert headlines[0].startswith("2023-11-14T22:13:20.000040Z 127.0.0.1:50123 > 127.0.0.1:11210 client>server")
    assert all(ISO_UTC.match(line) for line in headlines), headlines
    code, out, _ = run(["decode", "-F", "jsonl", str(PCAP)])
    assert json.loads(out.splitlines()[0])["ts"] == 1700000000.00004


@pytest.mark.usefixtures("india")
def test_local_time_shows_the_local_zone_with_its_offset() -> None:
    code, out, _ = run(["decode", "-F", "pretty", "--local-time", str(PCAP)])
    assert code == ExitCode.OK
    assert out.startswith("2023-11-15T03:43:20.000040+05:30 ")
    code, out, _ = run(["decode", "-F", "pretty", str(PCAP)])  # UTC unless asked
    assert out.startswith("2023-11-14T22:13:20.000040Z ")
    code, out, _ = run(["decode", "-F", "jsonl", "--local-time", str(PCAP)])
    assert json.loads(out.splitlines()[0])["ts"] == 1700000000.00004


@pytest.mark.parametrize("command", ["decode", "stream", "capture"])
def test_every_command_printing_times_takes_local_time(command: str) -> None:
    subcommand = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    options = {name for param in subcommand.params for name in param.opts}
    assert "--local-time" in options


def test_a_time_no_date_can_hold_stays_seconds() -> None:
    """A pcapng's 64-bit timestamp can be far past year 9999: printed as it is, never a traceback."""
    assert iso_time(1e18) == "1000000000000000000.000000"
    assert iso_time(float("nan")) == "nan"
    assert iso_time(-1e18, local=True) == "-1000000000000000000.000000"
    assert iso_time(0.5) == "1970-01-01T00:00:00.500000Z"


def _pretty_of(record: dict[str, object]) -> str:
    code, hex_lines, err = run(["encode"], stdin=json.dumps(record).encode())
    assert code == ExitCode.OK, err
    code, out, err = run(["hexdump", "-F", "pretty"], stdin=hex_lines.encode())
    assert code == ExitCode.OK, err
    return out


STREAM_REQ = {"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": 3, "opaque": 7, "flags": 0,
              "reserved": 0, "start_seqno": 0, "end_seqno": 18446744073709551615, "vbucket_uuid": 0,
              "snap_start_seqno": 0, "snap_end_seqno": 0}


def test_special_values_are_named_in_pretty_output_only() -> None:
    out = _pretty_of(STREAM_REQ)
    assert "end_seqno=max (no end)" in out
    assert "vbucket_uuid=0 (no history)" in out
    assert "start_seqno=0 (from the beginning)" in out
    assert "18446744073709551615" not in out
    _, hex_lines, _ = run(["encode"], stdin=json.dumps(STREAM_REQ).encode())
    _, out, _ = run(["hexdump", "-F", "jsonl"], stdin=hex_lines.encode())
    record = json.loads(out)
    assert (record["end_seqno"], record["vbucket_uuid"], record["start_seqno"]) == (18446744073709551615, 0, 0)


def test_a_value_is_named_only_where_it_means_that() -> None:
    """end_seqno 5 is a seqno; a uuid of 0 outside a stream request is a number (OBSERVE_SEQNO asks by uuid)."""
    out = _pretty_of({**STREAM_REQ, "end_seqno": 5, "start_seqno": 1, "vbucket_uuid": 99, "snap_start_seqno": 1,
                      "snap_end_seqno": 1})
    assert "end_seqno=5 " in out
    assert "vbucket_uuid=99 " in out
    assert "start_seqno=1 " in out
    out = _pretty_of({"magic": "ClientRequest", "opcode": "OBSERVE_SEQNO", "vbucket": 3, "opaque": 7,
                      "vbucket_uuid": 0})
    assert "vbucket_uuid=0" in out
    assert "no history" not in out


def test_collection_scope_and_manifest_ids_are_hex_and_a_dropped_collection_is_named() -> None:
    """As the manifest and kv_engine's logs write them (the key line's cid 0x9 too); an EndCollection has no
    key to show its collection with, so its collection id is among the fields. JSON keeps the numbers."""
    dropped = {"magic": "ClientRequest", "opcode": "DCP_SYSTEM_EVENT", "vbucket": 3, "opaque": 7, "by_seqno": 9,
               "event_id": 1, "event_version": 0, "manifest_uid": 0x20, "scope_id": 8, "collection_id": 9}
    out = _pretty_of(dropped)
    assert "event_id=1 (EndCollection)" in out
    assert "manifest_uid=0x20 scope_id=0x8 collection_id=0x9" in out
    begun = {**dropped, "event_id": 0, "key": "orders", "manifest_uid": 0x1F}
    out = _pretty_of(begun)
    assert "manifest_uid=0x1f scope_id=0x8" in out
    assert "key [cid 0x9] 'orders'" in out
    assert "collection_id=" not in out  # on the key line once, not among the fields again
    _, hex_lines, _ = run(["encode"], stdin=json.dumps(dropped).encode())
    _, out, _ = run(["hexdump", "-F", "jsonl"], stdin=hex_lines.encode())
    assert {k: json.loads(out)[k] for k in ("manifest_uid", "scope_id", "collection_id")} == {
        "manifest_uid": 32, "scope_id": 8, "collection_id": 9}


def test_item_times_and_never_expiring_items_are_said() -> None:
    code, out, _ = run(["decode", "-F", "pretty", "--opcode", "DCP_MUTATION", "--opcode", "DCP_DELETION", str(PCAP)])
    assert code == ExitCode.OK
    assert "expiration=0 (never)" in out
    assert "lock_time=0 (not locked)" in out
    assert "delete_time=1732270000 (2024-11-22T10:06:40Z)" in out


def test_wrapped_lines_continue_under_their_first_column_on_a_narrow_terminal() -> None:
    code, out, _ = run(["decode", "-F", "pretty", "--opcode", "DCP_STREAM_REQ", str(PCAP)], tty=True, width=60)
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert max(map(len, lines)) <= 60
    # every line is a headline (its time first) or indented under it: nothing wraps back to column 0
    assert all(ISO_UTC.match(line) or line.startswith("    ") for line in lines), out
    diagnostic = next(i for i, line in enumerate(lines) if line.startswith("    warning rollback:"))
    assert lines[diagnostic + 1].startswith("    ")
    assert not lines[diagnostic + 1].startswith("    warning")
    assert len([line for line in lines if not line.startswith(" ")]) == 4  # one headline a message


def test_piped_pretty_output_keeps_each_line_whole() -> None:
    """Not a terminal: a long line stays one line for grep and less -S, however wide."""
    code, out, _ = run(["decode", "-F", "pretty", "--opcode", "DCP_STREAM_REQ", str(PCAP)], width=None)
    assert code == ExitCode.OK
    diagnostic = next(line for line in out.splitlines() if "stream opened after rolling back" in line)
    assert diagnostic.startswith("    warning rollback:")
    assert diagnostic.endswith("The client retried as a correct client does.")


def test_decode_summary_times_count_from_the_first_message_and_a_total_follows() -> None:
    code, out, _ = run(["decode", "--summary", str(PCAP)], width=250)
    assert code == ExitCode.OK
    assert "first, last: seconds since the first message" in out
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    *per_vbucket, total = rows
    assert total[0] == "total"
    for column in (2, 3, 4, 6, 7, 8, 9):  # messages, bytes, items, snapshots, rollbacks, errors, diagnostics
        assert int(total[column]) == sum(int(row[column]) for row in per_vbucket)
    assert total[2] == "22"
    # the sample's messages are 10 microseconds apart: the control traffic (HELLO first, the noop's answer
    # last) in the connection's row, the stream from its request to its end in vbucket 12's
    assert [(row[1], row[10], row[11]) for row in per_vbucket] == [
        ("-", "0.000000", "0.000220"), ("12", "0.000100", "0.000230")]
    assert (total[10], total[11]) == ("0.000000", "0.000230")
    code, out, err = run(["decode", "--summary", "-F", "json", str(PCAP)], width=None)  # records untouched
    assert code == ExitCode.OK
    assert len(json.loads(out)) == 22
    assert "127.0.0.1:50123 > 127.0.0.1:11210" in err
    assert "…" not in err  # standard error is not a terminal: the table is not cut to 80 columns


@pytest.mark.parametrize(("expiration", "said"), [(3600, "expiration=3600 (in 3600 s)"),
                                                  (2592000, "expiration=2592000 (in 2592000 s)"),
                                                  (1700000000, "expiration=1700000000 (2023-11-14T22:13:20Z)")])
def test_a_clients_expiration_of_at_most_30_days_is_relative(expiration: int, said: str) -> None:
    """SET's expiration 3600 was shown as 1970-01-01T01:00:00Z: a client's value up to 30 days is seconds
    from the request (memcached's rule), only a larger one an epoch time."""
    record = {"magic": "ClientRequest", "opcode": "SET", "key": "k", "flags": 0, "expiration": expiration,
              "value": "v"}
    code, packet, _ = run(["encode"], stdin=json.dumps(record).encode())
    assert code == ExitCode.OK
    code, out, _ = run(["hexdump", "-F", "pretty"], stdin=packet.encode("latin-1"))
    assert code == ExitCode.OK
    assert said in out
