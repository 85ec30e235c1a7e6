"""What the analyses need, gathered where the rows are made: partial results per batch of rows, merged.

Theory of operation. Every batch of message rows a decode task writes also goes through :func:`partial`:
Arrow compute kernels and group-bys give the per-second and per-vbucket aggregates, and filters keep the
rows a report lists (seqno gaps, stream requests, stalls). The task hands its partials to the driver,
which :func:`merge` combines. This is the map-side half of a Spark aggregation, done on batches the task
already holds. Reading the dataset back to aggregate it cost more than decoding it did (measured: a
report of about 8 s against well under 1 s at 6M rows). Sums, minimums and maximums merge as such. A
value "at the end" of a second is taken from the partial holding the highest ``sequence``, because a
connection's rows are all in one task, in order. Lists are kept in order and cut at a limit per task,
then again after merging.

Pure: pyarrow only, no Spark. The driver-side analyses are in ``analyses``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from dcpctl.protocol.registry import DOCUMENT_ITEM_OPCODES, names

# the stream items about a document (changes and prepares, as decode --summary counts them), by record name
ITEMS: Final = tuple(sorted(names(DOCUMENT_ITEM_OPCODES)))
LIST_LIMIT: Final = 1000  # rows of a list-like analysis kept per task, and in the report
# What a stream request row keeps for the rollback and latency analyses
REQUEST_COLUMNS: Final = ("ts", "connection", "direction", "offset", "sequence", "vbucket", "status", "start_seqno",
                          "vbucket_uuid", "snap_start_seqno", "snap_end_seqno", "rollback_seqno", "stream_vbucket",
                          "latency_ms", "request_offset")
SECOND_SUMS: Final = ("messages", "items", "bytes", "acks", "exceeded", "stalls")
VBUCKET_SUMS: Final = ("items", "repeated", "gaps", "backwards", "outside_snapshot", "before_marker",
                       "invalid_seqnos")


@dataclass
class Partials:
    """Partial results of some batches (see the module docstring)."""

    seconds: list[dict[str, Any]] = field(default_factory=list)
    vbuckets: list[dict[str, Any]] = field(default_factory=list)
    gaps: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    stalls: list[dict[str, Any]] = field(default_factory=list)
    span: list[float] = field(default_factory=list)  # the first and last message's ts (empty: no message)

    def extend(self, other: Partials) -> None:
        if other.span:
            self.span = [min(self.span[0], other.span[0]), max(self.span[1], other.span[1])] if self.span \
                else list(other.span)
        self.seconds += other.seconds
        self.vbuckets += other.vbuckets
        self.gaps = sorted(self.gaps + other.gaps, key=_gap_order)[:LIST_LIMIT]
        self.requests += other.requests
        self.stalls = sorted(self.stalls + other.stalls, key=_stall_order)[:LIST_LIMIT]


def _gap_order(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["connection"], row["vb"], row["by_seqno"]


def _stall_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """The report's order, so that what a limit cuts is the report's last rows, not a later task's."""
    return row["connection"], row["ts"]


def _has(diagnostics: Any, name: str, rows: int) -> Any:
    """Per row: whether its diagnostics include ``name``."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    mask = np.zeros(rows, dtype=bool)
    names = pc.struct_field(pc.list_flatten(diagnostics), "name")
    if len(names):
        parents = pc.list_parent_indices(diagnostics).to_numpy()
        mask[parents[pc.equal(names, name).to_numpy(zero_copy_only=False)]] = True
    return pa.array(mask)


def partial(batch: Any, stall_ms: float) -> Partials:
    """The partial results of one batch of message rows (columns as ``schema.column_types``)."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    rows = batch.num_rows
    table = pa.Table.from_batches([batch])
    column = table.column
    diagnostics = column("diagnostics")
    pushed = pc.equal(column("direction"), "server>client")
    item = pc.and_(pc.and_(pushed, pc.is_in(column("opcode"), pa.array(ITEMS))), pc.is_valid(column("by_seqno")))
    seqno = pc.if_else(pc.and_(item, pc.greater_equal(column("by_seqno"), 0)), column("by_seqno"), None)
    # the seqnos of a stream run through every message that takes one (items, commits, system events...)
    taken = pc.and_(pushed, pc.is_valid(column("stream_seqno")))
    position = pc.if_else(pc.and_(taken, pc.greater_equal(column("stream_seqno"), 0)), column("stream_seqno"), None)
    previous = pc.if_else(pc.greater_equal(column("previous_seqno"), 0), column("previous_seqno"), None)
    # a seqno the one before again, and one below it, each counted once
    repeated = pc.fill_null(pc.equal(position, previous), fill_value=False)
    backwards = pc.fill_null(pc.less(position, previous), fill_value=False)
    gap = pc.fill_null(pc.greater(position, pc.add(previous, 1)), fill_value=False)
    stalled = pc.fill_null(pc.greater_equal(column("blocked_ms"), stall_ms), fill_value=False)
    capture_gap = pc.fill_null(column("capture_gap_before"), fill_value=False)
    outside = _has(diagnostics, "seqno_outside_snapshot", rows)

    def count(mask: Any) -> Any:
        return pc.cast(mask, pa.int64())

    work = pa.table({
        "connection": column("connection"), "second": pc.cast(pc.floor(column("ts")), pa.int64()),
        "vb": pc.coalesce(column("stream_vbucket"), column("vbucket")), "sequence": column("sequence"),
        "messages": pa.repeat(pa.scalar(1, pa.int64()), rows), "items": count(item),
        "bytes": pc.if_else(pushed, pc.add(column("total_body_length"), 24), 0),
        "unacked": column("unacked_bytes"), "window": column("buffer_size"),
        "acks": count(pc.and_(pc.invert(pushed), pc.equal(column("opcode"), "DCP_BUFFER_ACKNOWLEDGEMENT"))),
        "exceeded": count(_has(diagnostics, "flow_control_exceeded", rows)), "stalls": count(stalled),
        "blocked": column("blocked_ms"), "seqno": seqno, "repeated": count(repeated), "gaps": count(gap),
        "backwards": count(backwards), "outside_snapshot": count(pc.and_(taken, outside)),
        "before_marker": count(pc.and_(taken, _has(diagnostics, "item_before_marker", rows))),
        "invalid_seqnos": count(pc.fill_null(pc.and_(taken, pc.less(column("stream_seqno"), 0)), fill_value=False)),
    })
    seconds = work.group_by(["connection", "second"], use_threads=False).aggregate(
        [(name, "sum") for name in SECOND_SUMS]
        + [("unacked", "max"), ("unacked", "last"), ("window", "last"), ("blocked", "max"), ("sequence", "max")])
    vbuckets = work.filter(taken).group_by(["connection", "vb"], use_threads=False).aggregate(
        [(name, "sum") for name in VBUCKET_SUMS] + [("seqno", "min"), ("seqno", "max")])
    gaps = table.filter(gap).select(["connection", "ts", "previous_seqno", "stream_seqno"])
    kinds = [("suspicious: bytes missing from the capture" if lost else
              "suspicious: the item is outside its snapshot" if out else
              "expected: deduplication or filtered collections")
             for lost, out in zip(capture_gap.filter(gap).to_pylist(), outside.filter(gap).to_pylist(), strict=True)]
    gap_vbuckets = work.filter(gap).column("vb").to_pylist()
    requests = table.filter(pc.equal(column("opcode"), "DCP_STREAM_REQ"))
    rollback = [next((d["message"] for d in found if d["name"] == "rollback"), None)
                for found in requests.column("diagnostics").to_pylist()]
    stalls = table.filter(stalled).select(["connection", "ts", "blocked_ms", "unacked_bytes", "buffer_size"])
    bounds = pc.min_max(column("ts")).as_py()
    return Partials(
        span=[] if bounds["min"] is None else [bounds["min"], bounds["max"]],
        seconds=[_renamed(row) for row in seconds.to_pylist()],
        vbuckets=[_renamed(row) for row in vbuckets.to_pylist()],
        gaps=sorted(({"connection": row["connection"], "vb": vb, "previous": row["previous_seqno"],
                      "by_seqno": row["stream_seqno"], "missing": row["stream_seqno"] - row["previous_seqno"] - 1,
                      "kind": kind, "ts": row["ts"]}
                     for row, vb, kind in zip(gaps.to_pylist(), gap_vbuckets, kinds, strict=True)),
                    key=_gap_order)[:LIST_LIMIT],
        requests=[{**row, "rollback": message} for row, message in
                  zip(requests.select(list(REQUEST_COLUMNS)).to_pylist(), rollback, strict=True)],
        stalls=sorted(({"connection": row["connection"], "ts": row["ts"], "stalled_ms": row["blocked_ms"],
                        "unacked_bytes": row["unacked_bytes"], "buffer_size": row["buffer_size"]}
                       for row in stalls.to_pylist()), key=_stall_order)[:LIST_LIMIT])


_NAMES: Final = {**{f"{name}_sum": name for name in (*SECOND_SUMS, *VBUCKET_SUMS)},
                  "unacked_max": "unacked", "blocked_max": "longest_stall_ms", "sequence_max": "last_sequence",
                  "seqno_min": "first_seqno", "seqno_max": "last_seqno"}  # pyarrow's aggregate names -> the report's


def _renamed(row: dict[str, Any]) -> dict[str, Any]:
    return {_NAMES.get(name, name): value for name, value in row.items()}


def merge(partials: Partials) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(per second, per vbucket): the partials of every task and batch combined, sorted."""
    seconds: dict[tuple[str, int], dict[str, Any]] = {}
    for row in partials.seconds:
        found = seconds.get((row["connection"], row["second"]))
        if found is None:
            seconds[(row["connection"], row["second"])] = dict(row)
            continue
        for name in SECOND_SUMS:
            found[name] += row[name]
        found["unacked"] = _max(found["unacked"], row["unacked"])
        found["longest_stall_ms"] = _max(found["longest_stall_ms"], row["longest_stall_ms"])
        if row["last_sequence"] > found["last_sequence"]:
            found.update(last_sequence=row["last_sequence"], unacked_last=row["unacked_last"],
                         window_last=row["window_last"])
    vbuckets: dict[tuple[str, int], dict[str, Any]] = {}
    for row in partials.vbuckets:
        found = vbuckets.get((row["connection"], row["vb"]))
        if found is None:
            vbuckets[(row["connection"], row["vb"])] = dict(row)
            continue
        for name in VBUCKET_SUMS:
            found[name] += row[name]
        found["first_seqno"] = _min(found["first_seqno"], row["first_seqno"])
        found["last_seqno"] = _max(found["last_seqno"], row["last_seqno"])
    per_second = [{k: v for k, v in row.items() if k != "last_sequence"}
                  for _, row in sorted(seconds.items(), key=lambda kv: kv[0])]
    per_vbucket = [row for _, row in sorted(vbuckets.items(), key=lambda kv: kv[0])]
    return per_second, per_vbucket


def _max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def _min(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)
