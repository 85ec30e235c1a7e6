"""``rollback negotiate``: a stream request sent for real, retried the way a correct client retries.

Each round sends DCP_STREAM_REQ and reads the answer; the rollback engine predicts the same answer from
the failover log and high seqno the server reported first, so every round says the rule behind it and
whether the server agreed. On Rollback the client side of the engine (reference 9.4) gives the retry.
On success the stream is closed at once: this command looks, it does not consume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dcpctl.client.connection import Connection
from dcpctl.dcp.rollback import (
    DEFAULT_MAX_ROUNDS,
    FailoverEntry,
    StreamRequest,
    VbucketState,
    check_stream_request,
    failover_entries,
    next_request,
)
from dcpctl.protocol.constants import Opcode, Status


@dataclass
class LiveRound:
    request: StreamRequest
    status: str
    rollback_seqno: int | None
    predicted_status: str
    predicted_rollback_seqno: int | None
    rule: str
    reason: str

    @property
    def agrees(self) -> bool:
        return (self.status, self.rollback_seqno) == (self.predicted_status, self.predicted_rollback_seqno)

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request.to_json(), "status": self.status, "rollback_seqno": self.rollback_seqno,
                "engine": {"status": self.predicted_status, "rollback_seqno": self.predicted_rollback_seqno,
                           "rule": self.rule, "reason": self.reason, "agrees": self.agrees}}


def server_view(conn: Connection, vbucket: int) -> VbucketState:
    log = conn.check(Opcode.GET_FAILOVER_LOG, f"GET_FAILOVER_LOG vbucket {vbucket}", vbucket=vbucket)
    seqnos = conn.check(Opcode.GET_ALL_VB_SEQNOS).field("vbucket_seqnos") or ()
    high = next((int(e.seqno) for e in seqnos if e.vbucket == vbucket), 0)
    return VbucketState(tuple(failover_entries(log)), high)


def negotiate_live(conn: Connection, vbucket: int, request: StreamRequest, client_log: list[FailoverEntry],
                   server: VbucketState, max_rounds: int = DEFAULT_MAX_ROUNDS) -> list[LiveRound]:
    """Rounds until the stream opens, fails with another status, or ``max_rounds`` pass."""
    rounds: list[LiveRound] = []
    log = list(client_log)
    for _ in range(max_rounds):
        predicted = check_stream_request(request, server, noop_enabled=True)
        reply = conn.call(Opcode.DCP_STREAM_REQ, f"DCP_STREAM_REQ vbucket {vbucket}", vbucket=vbucket,
                          flags=request.flags, reserved=0, start_seqno=request.start_seqno,
                          end_seqno=request.end_seqno, vbucket_uuid=request.vbucket_uuid,
                          snap_start_seqno=request.snap_start, snap_end_seqno=request.snap_end)
        if reply.status in (Status.SUCCESS, Status.ROLLBACK):  # a Rollback without its seqno is no round
            conn.well_formed(reply, f"DCP_STREAM_REQ vbucket {vbucket}")
        status = str(reply.status_name)
        seqno = reply.field("rollback_seqno") if reply.status == Status.ROLLBACK else None
        rounds.append(LiveRound(request, status, int(seqno) if isinstance(seqno, int) else None, predicted.status,
                                predicted.rollback_seqno, predicted.rule, predicted.reason))
        if reply.status == Status.SUCCESS:
            # the items the open stream sent meanwhile are not wanted: this command looks, it does not consume
            conn.call(Opcode.DCP_CLOSE_STREAM, keep=False, vbucket=vbucket)
            break
        if reply.status != Status.ROLLBACK or seqno is None:
            break
        request, log = next_request(request, log, int(seqno))
    return rounds
