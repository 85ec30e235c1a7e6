"""Comparing failover-log dumps (``dcpctl failover --compare``): pure, dumps in, findings out.

A failover log lists, newest first, the uuids a vbucket's history went through and the seqno each began
at. Between two dumps of the same vbucket: entries only in the new one are new branches (a failover or
a promotion happened). The history the old dump knew was abandoned, a divergent history where consumers
that followed it must roll back, when an entry of the old dump is missing from the new one (the log was
cut back below it), or when a new branch begins below the old dump's high seqno (the items after that
seqno, which the old branch had, are gone: the usual failover of a vbucket whose replica lagged).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from dcpctl.dcp.rollback import FailoverEntry, number, parse_failover_log

# What every object of a --format json dump has: a file without them is not a dump (an object with only a
# vbucket compared as an empty log, and reported every entry as new)
DUMP_FIELDS: Final = ("vbucket", "failover_log", "high_seqno", "node")
ENTRY_FIELDS: Final = ("vbucket_uuid", "seqno")


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


@dataclass(frozen=True)
class Dumped:
    """One vbucket of a dump: its failover log and, when the dump has it, its high seqno."""

    failover_log: list[FailoverEntry]
    high_seqno: int | None = None


def dump_logs(dump: Any) -> dict[int, Dumped]:
    """``dcpctl failover --format json`` output -> vbucket -> its log and high seqno (ValueError or TypeError
    on anything else)."""
    if not isinstance(dump, list):
        raise TypeError("a failover dump is a JSON list of {vbucket, failover_log, ...} objects")
    out = {}
    for item in dump:
        if not isinstance(item, dict) or "vbucket" not in item:
            raise TypeError("each entry needs vbucket and failover_log")
        high = item.get("high_seqno")
        out[number(item["vbucket"], "vbucket")] = Dumped(parse_failover_log(item.get("failover_log", [])),
                                                          number(high, "high_seqno") if high is not None else None)
    return out


def checked_dump(data: Any) -> dict[int, Dumped]:
    """An earlier dump (``--compare``) as :func:`dump_logs` reads it, once it is seen to be one: a ValueError
    saying what is missing otherwise."""
    if not isinstance(data, list) or not data:
        raise ValueError("not a failover dump: a dump is a non-empty JSON list of {" + ", ".join(DUMP_FIELDS)
                         + "} objects")
    for index, item in enumerate(data):
        missing = [name for name in DUMP_FIELDS if name not in item] if isinstance(item, dict) else DUMP_FIELDS
        log = item.get("failover_log") if isinstance(item, dict) else None
        if not missing and (not isinstance(log, list) or not all(
                isinstance(e, dict) and all(name in e for name in ENTRY_FIELDS) for e in log)):
            missing = ["failover_log entries with " + " and ".join(ENTRY_FIELDS)]
        if missing:
            raise ValueError(f"not a failover dump: entry {index} has no {', '.join(missing)}")
    dump = dump_logs(data)
    if len(dump) != len(data):
        raise ValueError("not a failover dump: a vbucket is listed twice")
    return dump


def compare(old: dict[int, Dumped], new: dict[int, Dumped]) -> list[Change]:
    changes = []
    for vb in sorted(set(old) | set(new)):
        if vb not in old:
            changes.append(Change(vb, "new_vbucket", message=f"vbucket {vb} was not in the earlier dump"))
            continue
        if vb not in new:
            changes.append(Change(vb, "missing_vbucket", message=f"vbucket {vb} is not in this dump"))
            continue
        before, after = old[vb].failover_log, new[vb].failover_log
        added = tuple(e for e in after if e not in before)
        lost = tuple(e for e in before if e not in after)
        high = old[vb].high_seqno
        cut = [e for e in added if high is not None and e.seqno < high]
        if cut and not lost:
            branch = min(cut, key=lambda e: e.seqno)
            lowest = branch.seqno
            changes.append(Change(vb, "divergent", added, (), (
                f"vbucket {vb}: divergent history: a new branch (uuid {branch.vbucket_uuid}) begins at seqno "
                f"{lowest}, below the earlier dump's high seqno {high}: items {lowest + 1}-{high} of the earlier "
                f"history are gone; consumers past seqno {lowest} must roll back to it")))
        elif lost:
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
