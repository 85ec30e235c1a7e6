"""The rollback engine: the server's decision on a stream request, and what a correct client does next.

Theory of operation. ``needs_rollback`` is the producer's failover-table rule (reference 9.1,
kv_engine ``FailoverTable::needsRollback``): start 0 never rolls back unless StrictVbUuid is set with a
uuid; a start below the purge seqno rolls back to 0 unless the client already saw that purge seqno; the
client's uuid is looked up oldest to newest and its history ends where the next newer entry begins; then
the snapshot adjustments decide between "the histories agree" and "roll back to the lower of that end
and the snapshot start". ``check_stream_request`` puts that rule in the producer's full order of checks
(reference 9.3). ``next_request`` is the client side (reference 9.4): drop failover entries above the
rollback seqno, resume from it with a snapshot at it and the newest remaining uuid. ``negotiate`` runs
both until the stream would open, bounded by ``max_rounds``. ``high_seqno_shown`` reads the rule backwards
for a capture, which never carries the high seqno: where a Rollback answer can only be that high seqno.

Invariants: every decision carries a stable rule id and a sentence with the numbers; rolling back never
raises the start seqno; nothing here does I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

import orjson

from dcpctl.protocol.constants import StreamRequestFlag
from dcpctl.safetext import brief

if TYPE_CHECKING:
    from dcpctl.protocol.message import Message

END_FOREVER: Final = (1 << 64) - 1
# The stream-request flags the rules read, as plain ints (a request's flags are a plain int).
STRICT_VB_UUID: Final = int(StreamRequestFlag.STRICT_VB_UUID)
FROM_LATEST: Final = int(StreamRequestFlag.FROM_LATEST)
IGNORE_PURGED_TOMBSTONES: Final = int(StreamRequestFlag.IGNORE_PURGED_TOMBSTONES)
TO_LATEST: Final = int(StreamRequestFlag.TO_LATEST)
DISK_ONLY: Final = int(StreamRequestFlag.DISK_ONLY)
ACTIVE_VB_ONLY: Final = int(StreamRequestFlag.ACTIVE_VB_ONLY)
# A correct client converges in at most one round per failover entry (25 by default on the server);
# more rounds than this means the two sides disagree about something else.
DEFAULT_MAX_ROUNDS: Final = 30


@dataclass(frozen=True)
class FailoverEntry:
    vbucket_uuid: int
    seqno: int

    def to_json(self) -> dict[str, int]:
        return {"vbucket_uuid": self.vbucket_uuid, "seqno": self.seqno}


@dataclass(frozen=True)
class StreamRequest:
    start_seqno: int
    vbucket_uuid: int
    snap_start_seqno: int | None = None
    snap_end_seqno: int | None = None
    end_seqno: int = END_FOREVER
    flags: int = 0
    purge_seqno: int | None = None  # the JSON value's purge_seqno: the last one the client saw

    @property
    def snap_start(self) -> int:
        return self.start_seqno if self.snap_start_seqno is None else self.snap_start_seqno

    @property
    def snap_end(self) -> int:
        return self.start_seqno if self.snap_end_seqno is None else self.snap_end_seqno

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"start_seqno": self.start_seqno, "vbucket_uuid": self.vbucket_uuid,
                               "snap_start_seqno": self.snap_start, "snap_end_seqno": self.snap_end,
                               "end_seqno": self.end_seqno, "flags": self.flags}
        if self.purge_seqno is not None:
            out["purge_seqno"] = self.purge_seqno
        return out


@dataclass(frozen=True)
class VbucketState:
    failover_log: tuple[FailoverEntry, ...]  # newest first
    high_seqno: int
    purge_seqno: int = 0
    state: str = "active"
    persisted_seqno: int | None = None
    collection_high_seqno: int | None = None  # filtered collection streams only


@dataclass(frozen=True)
class Decision:
    rollback_seqno: int | None  # None: no rollback
    rule: str
    reason: str

    @property
    def rollback(self) -> bool:
        return self.rollback_seqno is not None


@dataclass(frozen=True)
class Answer:
    status: str  # kv_engine status name
    rule: str
    reason: str
    rollback_seqno: int | None = None
    end_seqno: int | None = None
    start_seqno: int | None = None


@dataclass(frozen=True)
class Round:
    request: StreamRequest
    answer: Answer

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request.to_json(), "status": self.answer.status,
                "rollback_seqno": self.answer.rollback_seqno, "rule": self.answer.rule,
                "reason": self.answer.reason}


def needs_rollback(req: StreamRequest, vb: VbucketState) -> Decision:
    """The server's failover-table rule (reference 9.1)."""
    start, uuid = req.start_seqno, req.vbucket_uuid
    snap_start, snap_end = req.snap_start, req.snap_end
    strict = bool(req.flags & STRICT_VB_UUID)
    local_purge = 0 if req.flags & IGNORE_PURGED_TOMBSTONES else vb.purge_seqno
    remote_purge = req.purge_seqno or 0
    if start == 0 and (not strict or uuid == 0):
        return Decision(None, "start_zero", "start seqno 0: the client has nothing, so there is "
                        "nothing to roll back" + (" (StrictVbUuid is set but the uuid is 0)" if strict else ""))
    max_coll = vb.collection_high_seqno
    exempt = (max_coll is not None and start < local_purge and start >= max_coll and max_coll <= local_purge)
    if start < local_purge and start != 0 and not exempt and remote_purge != local_purge:
        return Decision(0, "purge_seqno",
                        f"start seqno {start} is below the server's purge seqno {local_purge}: tombstones the "
                        "client never saw may have been purged, so it must start again from 0"
                        + (f" (the client's purge_seqno {remote_purge} is not the current one)"
                           if req.purge_seqno is not None else ""))
    newest = history_is_newest(uuid, vb.failover_log)
    if newest is None:
        return Decision(0, "uuid_not_found",
                        f"vbucket uuid {uuid} (0x{uuid:x}) is not in the server's failover log: no common "
                        "history, roll back to 0")
    upper = vb.high_seqno if newest else _history_end(uuid, vb.failover_log)
    snap_start, snap_end = compared_snapshot(req)
    if snap_end <= upper:
        return Decision(None, "snapshot_within_history",
                        f"uuid {uuid} is valid up to seqno {upper} and the client's snapshot ends at {snap_end}: "
                        "the histories agree, no rollback")
    seqno = upper if upper < snap_start else snap_start
    return Decision(seqno, "consumer_ahead",
                    f"uuid {uuid}'s history ends at seqno {upper} on the server"
                    + (" (its high seqno: the uuid is the newest entry)" if newest else "")
                    + f", but the client's snapshot ({snap_start}-{snap_end}) goes past it: roll back to {seqno}")


def history_is_newest(uuid: int, failover_log: Sequence[FailoverEntry]) -> bool | None:
    """Whether ``uuid``'s history is the newest one, which ends at the high seqno; None when the uuid is not in
    the log. The log is scanned oldest to newest, so a uuid listed twice is its oldest entry (reference 9.1)."""
    for index, entry in enumerate(reversed(failover_log)):
        if entry.vbucket_uuid == uuid:
            return index == len(failover_log) - 1
    return None


def _history_end(uuid: int, failover_log: Sequence[FailoverEntry]) -> int:
    """The seqno where an older history ends: the next newer entry's."""
    oldest_first = list(reversed(failover_log))
    index = next(i for i, entry in enumerate(oldest_first) if entry.vbucket_uuid == uuid)
    return oldest_first[index + 1].seqno


def compared_snapshot(req: StreamRequest) -> tuple[int, int]:
    """The snapshot the rule compares with the history's end (reference 9.1 step 4): a client that has no item
    of its last snapshot (start at its start) is taken to end at start; one that has all of it (start at its
    end), to start at start."""
    start, snap_start, snap_end = req.start_seqno, req.snap_start, req.snap_end
    if start == snap_start:
        snap_end = start
    if start == snap_end:
        snap_start = start
    return snap_start, snap_end


def high_seqno_shown(req: StreamRequest, failover_log: Sequence[FailoverEntry], rollback_seqno: int) -> int | None:
    """The server's high seqno as its Rollback answer shows it, or None where the answer does not show it.

    Only consumer_ahead reads the high seqno, and only on the newest history: there it answers min(high,
    snapshot start), so an answer above 0 and below the compared snapshot start is the high seqno itself. An
    answer of 0 may be the purge rule's or an unknown uuid's, and the snapshot start hides any high above it."""
    snap_start, _ = compared_snapshot(req)
    if not history_is_newest(req.vbucket_uuid, failover_log) or not 0 < rollback_seqno < snap_start:
        return None
    # a high seqno is never below its newest entry's seqno: such an answer has another cause
    return rollback_seqno if rollback_seqno >= failover_log[0].seqno else None


def check_stream_request(req: StreamRequest, vb: VbucketState | None, *, stream_exists: bool = False,
                         noop_enabled: bool = True, xattrs_or_collections: bool = False,
                         filter_answer: Answer | None = None) -> Answer:
    """The producer's order of checks (reference 9.3); ``filter_answer`` is the producer's verdict on the
    request's value (collection filter, stream id), which the server reaches at step 6."""
    if vb is None:
        return Answer("NotMyVbucket", "vbucket_absent", "the vbucket does not exist on this node")
    if vb.state not in ("active", "replica") or (req.flags & ACTIVE_VB_ONLY and vb.state != "active"):
        return Answer("NotMyVbucket", "vbucket_state", f"the vbucket is {vb.state}")
    if req.flags & FROM_LATEST:
        latest = vb.failover_log[0].vbucket_uuid if vb.failover_log else 0
        req = replace(req, start_seqno=vb.high_seqno, snap_start_seqno=vb.high_seqno,
                      snap_end_seqno=vb.high_seqno, vbucket_uuid=req.vbucket_uuid or latest)
    if xattrs_or_collections and not noop_enabled:
        return Answer("NotSupported", "noop_required", "xattrs or collections need enable_noop first")
    if req.start_seqno > req.end_seqno:
        return Answer("Erange", "start_after_end", f"start seqno {req.start_seqno} is after end seqno "
                      f"{req.end_seqno}")
    if not req.snap_start <= req.start_seqno <= req.snap_end:
        return Answer("Erange", "snapshot_range", f"snap_start {req.snap_start} <= start {req.start_seqno} "
                      f"<= snap_end {req.snap_end} does not hold")
    if filter_answer is not None:
        return filter_answer
    if stream_exists:
        return Answer("KeyEexists", "stream_exists", "a stream for this vbucket (and stream id) is open")
    decision = needs_rollback(req, vb)
    if decision.rollback:
        return Answer("Rollback", decision.rule, decision.reason, decision.rollback_seqno)
    end = req.end_seqno
    if req.flags & TO_LATEST:
        end = vb.collection_high_seqno if vb.collection_high_seqno is not None else vb.high_seqno
    elif req.flags & DISK_ONLY:
        end = vb.persisted_seqno if vb.persisted_seqno is not None else vb.high_seqno
    if req.start_seqno > end:
        return Answer("Erange", "start_after_end", f"start seqno {req.start_seqno} is after the adjusted end "
                      f"seqno {end}")
    if req.start_seqno > vb.high_seqno:
        return Answer("Erange", "start_after_high", f"start seqno {req.start_seqno} is beyond the vbucket's "
                      f"high seqno {vb.high_seqno}")
    return Answer("Success", decision.rule, decision.reason, None, end, req.start_seqno)


def next_request(req: StreamRequest, client_log: list[FailoverEntry],
                 rollback_seqno: int) -> tuple[StreamRequest, list[FailoverEntry]]:
    """What a correct client retries with (reference 9.4)."""
    kept = [entry for entry in client_log if entry.seqno <= rollback_seqno]
    uuid = kept[0].vbucket_uuid if kept else 0
    seqno = min(rollback_seqno, req.start_seqno)
    return replace(req, start_seqno=seqno, snap_start_seqno=seqno, snap_end_seqno=seqno, vbucket_uuid=uuid), kept


@dataclass
class Negotiation:
    rounds: list[Round] = field(default_factory=list)

    @property
    def result(self) -> Round:
        return self.rounds[-1]


def negotiate(req: StreamRequest, client_log: list[FailoverEntry], vb: VbucketState,
              max_rounds: int = DEFAULT_MAX_ROUNDS) -> Negotiation:
    out = Negotiation()
    log = list(client_log)
    for _ in range(max_rounds):
        answer = check_stream_request(req, vb)
        out.rounds.append(Round(req, answer))
        if answer.status != "Rollback" or answer.rollback_seqno is None:
            break
        req, log = next_request(req, log, answer.rollback_seqno)
    return out


def load_json(data: bytes) -> Any:
    """A failover log file's JSON, parsed with orjson: nesting bounded (1024 levels), 1e999 and lone
    surrogates refused; any error is a ValueError with orjson's one-line message."""
    return orjson.loads(data)


def failover_entries(msg: Message) -> list[FailoverEntry]:
    """The failover log a response carries (a stream request's Success, GET_FAILOVER_LOG), newest first, as
    its value declaration reads it; empty when it has none. The UPR draft's entries name no ``seqno``: 0."""
    return [FailoverEntry(int(e.vbucket_uuid), int(e.get("seqno", 0))) for e in msg.field("failover_log") or ()]


class VbucketChoiceError(ValueError):
    """A file of several vbuckets' failover logs and no --vbucket, or one naming a vbucket it does not hold:
    the command line is to change, not the file."""


def parse_failover_log(obj: Any, vbucket: int | None = None) -> list[FailoverEntry]:
    """A failover log from dcpctl's JSON (failover dumps, decoded responses) or plain lists."""
    return read_failover_log(obj, vbucket)[0]


def read_failover_log(obj: Any, vbucket: int | None = None) -> tuple[list[FailoverEntry], int | None]:
    """:func:`parse_failover_log`'s log, and the vbucket's high seqno where the JSON says it (a failover
    dump's ``high_seqno``), else None."""
    high: Any = None
    if isinstance(obj, dict) and "failover_log" in obj:
        high = obj.get("high_seqno")
        obj = obj["failover_log"]
    elif isinstance(obj, list) and obj and isinstance(obj[0], dict) and "failover_log" in obj[0]:
        if not all(isinstance(o, dict) for o in obj):  # a damaged dump, whatever --vbucket says
            raise ValueError("a failover dump is a list of {vbucket, high_seqno, failover_log} objects")
        chosen = [o for o in obj if isinstance(o, dict) and (vbucket is None or o.get("vbucket") == vbucket)]
        if len(chosen) != 1:
            raise VbucketChoiceError("the file holds several vbuckets' failover logs: choose one with --vbucket"
                             if len(chosen) > 1 else f"the file holds no failover log of vbucket {vbucket}")
        high = chosen[0].get("high_seqno")
        obj = chosen[0].get("failover_log")
    if not isinstance(obj, list):
        raise ValueError(  # noqa: TRY004 - bad input file content, reported as a value error
            "a failover log is a list of {vbucket_uuid, seqno} objects or [uuid, seqno] pairs")
    entries = []
    for index, item in enumerate(obj):
        if isinstance(item, dict) and "vbucket_uuid" in item and "seqno" in item:
            uuid, seqno = item["vbucket_uuid"], item["seqno"]
        elif isinstance(item, list | tuple) and len(item) == 2:
            uuid, seqno = item
        else:
            raise ValueError(f"failover log entry {index} is neither {{vbucket_uuid, seqno}} nor [uuid, seqno]")
        entries.append(FailoverEntry(number(uuid, f"entry {index} uuid"), number(seqno, f"entry {index} seqno")))
    return entries, None if high is None else number(high, "high_seqno")


def number(value: Any, what: str) -> int:
    """A u64 (uuids and seqnos are 64-bit unsigned on the wire), from a JSON integer or a decimal or 0x string."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = int(value, 0)
    if number is not None and 0 <= number <= END_FOREVER:
        return number
    raise ValueError(f"{what} is not a number from 0 to 2^64-1: {brief(value)}")
