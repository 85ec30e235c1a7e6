"""A response placed where its request was (pure: records in, what was decided about the request out).

A response's header says nothing of the vbucket or the document it answers (its vbucket field holds the
status; a GET's response has no key), so what counts it or filters it by them must follow its request:
the session tracker gives a response the offset of its request in the other direction
(``request_offset``), and :class:`Exchanges` keeps, per request, what was decided about it until then.
"""

from __future__ import annotations

from typing import Any, Final, Generic, TypeVar

from dcpctl.protocol.registry import ANSWERED_OPCODES, PUSHED_OPCODES, names

# Requests remembered until their response; beyond this many unanswered ones the oldest are forgotten (the
# session tracker's own bound on requests it pairs is the same order).
MAX_PENDING: Final = 4096
# What a producer pushes that no one answers (a stream's items, seqno advances, its end): never waited for, so a
# stream's flood does not push out the requests of the capture's other connections
UNANSWERED: Final = names(PUSHED_OPCODES - ANSWERED_OPCODES)
_OTHER: Final = {"client>server": "server>client", "server>client": "client>server"}

_T = TypeVar("_T")
Place = tuple[str, str, int]  # (connection, direction, offset): a message's place in its capture


class Exchanges(Generic[_T]):
    """What was decided about each request (``asked``), told again for its response (``answered``)."""

    def __init__(self, limit: int = MAX_PENDING) -> None:
        self.limit = limit
        self.pending: dict[Place, _T] = {}

    def asked(self, record: dict[str, Any], decided: _T) -> None:
        """A request's record and what was decided about it (a response's is not kept: it answers one)."""
        offset = record.get("offset")
        if "status" in record or not isinstance(offset, int) or record.get("opcode") in UNANSWERED:
            return
        if len(self.pending) >= self.limit:
            self.pending.pop(next(iter(self.pending)))
        self.pending[str(record.get("connection", "-")), str(record.get("direction", "")), offset] = decided

    def answered(self, record: dict[str, Any]) -> tuple[bool, _T | None]:
        """For a response whose request was :meth:`asked`: (True, what was decided about the request), which
        is then forgotten; for any other record (False, None)."""
        asked = record.get("request_offset")
        if not isinstance(asked, int):
            return False, None
        place = (str(record.get("connection", "-")), _OTHER.get(str(record.get("direction", "")), ""), asked)
        if place not in self.pending:
            return False, None
        return True, self.pending.pop(place)
