"""A decoded packet with what only its context knows: when and where it was seen, what its stream says.

The packet (:class:`~dcpctl.protocol.message.Message`) is what :func:`~dcpctl.protocol.message.decode` made of
its bytes, and nothing changes it afterwards. Sources (a capture, the live consumer) pair it with its context
in an :class:`Observed`; renderers take either, and the record shows the context around the packet's own
fields: ``first`` keys before them, ``last`` keys after them, the packet's diagnostics and then ``added``.
"""

from __future__ import annotations

from typing import Any, Final

from dcpctl.protocol.diagnostic import Diagnostic
from dcpctl.protocol.message import Message

_NOTHING: Final[dict[str, Any]] = {}


class Observed:
    """``packet`` as a source saw it: ``first`` (capture time, connection, direction, frames), ``last`` (what
    the connection's state says of it: ``stream_vbucket``...) and the diagnostics its context ``added``."""

    __slots__ = ("added", "first", "last", "packet", "rendered")

    def __init__(self, packet: Message, first: dict[str, Any], last: dict[str, Any] = _NOTHING,
                 added: list[Diagnostic] | tuple[()] = ()) -> None:
        self.packet = packet
        self.first = first
        self.last = last
        self.added = added
        # The renderer's record of it, kept once built so that a filter, a summary and the output share one
        # (``dcpctl.render.record`` builds it; nothing below render/ reads it).
        self.rendered: dict[str, Any] | None = None

    @property
    def diagnostics(self) -> list[Diagnostic] | tuple[()]:
        """Every diagnostic, in one order: the packet's (header, frame infos, extras, key, value), then
        ``added``."""
        found, added = self.packet.diagnostics, self.added
        if not added:
            return found
        return [*found, *added] if found else added


def packet_of(item: Message | Observed) -> Message:
    """The packet itself, observed or not."""
    return item.packet if type(item) is Observed else item  # type: ignore[return-value]
