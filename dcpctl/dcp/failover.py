"""Comparing failover-log dumps (``dcpctl failover --compare``): pure, dumps in, findings out.

A failover log lists, newest first, the uuids a vbucket's history went through and the seqno each began
at. Between two dumps of the same vbucket: entries only in the new one are new branches (a failover or
a promotion happened); an entry of the old dump missing from the new one means the history the old dump
knew was abandoned (the new log was cut back below it): a divergent history, where consumers that
followed the old branch must roll back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dcpctl.dcp.rollback import FailoverEntry, parse_failover_log


@dataclass(frozen=True)
class Change:
    vbucket: int
    kind: str  # unchanged | new_entries | divergent | new_vbucket | missing_vbucket
    new_entries: tuple[FailoverEntry, ...] = ()
    lost_entries: tuple[FailoverEntry, ...] = ()
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"vbucket": self.vbucket, "change": self.kind,
                "new_entries": [e.to_json() for e in self.new_entries],
                "lost_entries": [e.to_json() for e in self.lost_entries], "message": self.message}


def dump_logs(dump: Any) -> dict[int, list[FailoverEntry]]:
    """``dcpctl failover --format json`` output -> vbucket -> log (ValueError or TypeError on anything else)."""
    if not isinstance(dump, list):
        raise TypeError("a failover dump is a JSON list of {vbucket, failover_log, ...} objects")
    out = {}
    for item in dump:
        if not isinstance(item, dict) or "vbucket" not in item:
            raise TypeError("each entry needs vbucket and failover_log")
        out[int(item["vbucket"])] = parse_failover_log(item.get("failover_log", []))
    return out


def compare(old: dict[int, list[FailoverEntry]], new: dict[int, list[FailoverEntry]]) -> list[Change]:
    changes = []
    for vb in sorted(set(old) | set(new)):
        if vb not in old:
            changes.append(Change(vb, "new_vbucket", message=f"vbucket {vb} was not in the earlier dump"))
            continue
        if vb not in new:
            changes.append(Change(vb, "missing_vbucket", message=f"vbucket {vb} is not in this dump"))
            continue
        before, after = old[vb], new[vb]
        added = tuple(e for e in after if e not in before)
        lost = tuple(e for e in before if e not in after)
        if lost:
            changes.append(Change(vb, "divergent", added, lost, (
                f"vbucket {vb}: divergent history: the earlier dump's "
                + ", ".join(f"uuid {e.vbucket_uuid} from seqno {e.seqno}" for e in lost)
                + " is gone from the log; consumers that followed it must roll back")))
        elif added:
            changes.append(Change(vb, "new_entries", added, (), (
                f"vbucket {vb}: new failover entries: "
                + ", ".join(f"uuid {e.vbucket_uuid} from seqno {e.seqno}" for e in added))))
        else:
            changes.append(Change(vb, "unchanged", message=f"vbucket {vb}: unchanged"))
    return changes
