"""The analyses of ``dcpctl analyze``: the decode tasks' partial results merged, and Spark queries.

Each returns plain rows (lists of dicts) for the tables, the JSON and the plots. What the capture decoder
established in stream order is in the rows: the tracker's checks as diagnostics (``seqno_backwards``,
``seqno_outside_snapshot``, ``capture_gap``, ``rollback``...), the item before each item
(``previous_seqno``), the unacknowledged bytes and how long a full window blocked the producer
(``unacked_bytes``, ``blocked_ms``).

The per-second and per-vbucket aggregates, the gaps, the stream requests and the stalls are gathered by
the decode tasks from the rows they make (``rollup``). Reading millions of rows back from the dataset
cost more than decoding them: about 0.3 s per column per 6M rows, and a plan compilation per query in a
fresh Spark. What needs every row across tasks is a DataFrame query over the dataset: :func:`duplicates`,
only where the per-vbucket ranges say duplicates can be, and, for the plots, :func:`progress` and
:func:`unacked` (over the capture's span, which the tasks found).

Seqnos are 64-bit signed integers in the dataset, as kv_engine holds them; one above 2^63-1 on the wire
(never a real seqno) reads as negative there, and is left out of the seqno analyses and counted as
``invalid_seqnos``.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any, Final

from dcpctl.pipeline.rollup import ITEMS, Partials, merge

ROWS_LIMIT: Final = 1000  # rows of a list-like analysis kept in the report (the dataset has them all)
LISTS: Final = ("gaps", "duplicates", "stalls")  # the report's lists that ROWS_LIMIT cuts
# Vbucket seqno ranges where duplicates may be that are counted one by one; with more, every seqno is
# counted at once (one query either way; this only bounds the size of the query's filter expression).
MAX_SUSPECT_RANGES: Final = 256


def _plain(rows: list[Any]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        item = row.asDict()
        out.append({k: (int(v) if hasattr(v, "as_integer_ratio") and not isinstance(v, float) else v)
                    for k, v in item.items()})
    return out


def prepared(frame: Any) -> Any:
    """The columns the analyses read, with ``vb`` (a stream message's vbucket), ``second``, ``item`` (an
    item the producer pushed), ``seqno``/``previous`` (null when invalid) and the diagnostics' ``names``."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    item = f.col("opcode").isin(*ITEMS) & (f.col("direction") == "server>client") & f.col("by_seqno").isNotNull()
    return frame.select(
        "ts", "connection", "direction", "opcode", "offset", "sequence", "key", "total_body_length",
        "unacked_bytes", "buffer_size", "blocked_ms", "by_seqno", f.floor("ts").alias("second"),
        f.coalesce("stream_vbucket", "vbucket").alias("vb"), item.alias("item"),
        f.when(f.col("by_seqno") >= 0, f.col("by_seqno")).alias("seqno"),
        f.when(f.col("previous_seqno") >= 0, f.col("previous_seqno")).alias("previous"),
        f.col("diagnostics.name").alias("names"))


def duplicates(data: Any, per_vbucket: list[dict[str, Any]], limit: int = ROWS_LIMIT) -> list[dict[str, Any]]:
    """The same (vbucket, seqno) delivered more than once, on any connections (resumed or repeated streams).

    Counting every seqno of a big capture would be the costliest query of all, and duplicates are rare. So
    the per-vbucket rows say where they can be: a connection's vbucket whose seqnos repeated or went back
    (``repeated``, ``backwards``), or two connections whose seqno ranges for a vbucket overlap. Only those vbuckets and
    ranges are counted exactly; a capture without either costs nothing here."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    ranges: dict[int, list[tuple[int, int, bool]]] = {}
    for row in per_vbucket:
        if row["first_seqno"] is not None:
            ranges.setdefault(row["vb"], []).append((row["first_seqno"], row["last_seqno"],
                                                     bool(row["repeated"] or row["backwards"])))
    suspects: list[tuple[int, int, int]] = []  # (vbucket, low, high) where seqnos may repeat
    for vb, spans in ranges.items():
        for index, (low, high, repeated) in enumerate(spans):
            if repeated:
                suspects.append((vb, low, high))
            for other_low, other_high, _ in spans[index + 1:]:
                if low <= other_high and other_low <= high:
                    suspects.append((vb, max(low, other_low), min(high, other_high)))
    if not suspects:
        return []
    where = f.col("item") & f.col("seqno").isNotNull()
    if len(suspects) <= MAX_SUSPECT_RANGES:
        where = where & functools.reduce(operator.or_, [(f.col("vb") == vb) & f.col("seqno").between(low, high)
                                                        for vb, low, high in suspects])
    return _plain(data.where(where).groupBy("vb", "seqno").agg(
        f.count("*").alias("times"), f.collect_set("connection").alias("connections"), f.first("key").alias("key"))
        .where(f.col("times") > 1).select("vb", f.col("seqno").alias("by_seqno"), "times", "key", "connections")
        .orderBy("vb", "by_seqno").limit(limit).collect())


def rollbacks(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every Rollback answer: when, on which connection, from what to what, whether the client retried, and
    the rollback engine's explanation (the tracker's, on the response that opened the stream after the
    retry; when the capture has no retry, on the answer itself). The tracker paired each answer with its
    request (``request_offset``)."""
    asked = {(r["connection"], r["offset"]): r for r in requests if r["direction"] == "client>server"}
    answers = [r for r in requests if r["direction"] == "server>client"]
    found = []
    for answer in answers:
        if answer["status"] != "Rollback":
            continue
        request = asked.get((answer["connection"], answer["request_offset"])) or {}
        vb = answer["stream_vbucket"] if answer["stream_vbucket"] is not None else request.get("vbucket")
        settled = next((r for r in answers if r["status"] == "Success" and r["rollback"]
                        and r["connection"] == answer["connection"] and r["stream_vbucket"] == vb
                        and r["ts"] >= answer["ts"]), None)
        found.append({"ts": answer["ts"], "connection": answer["connection"], "vb": vb,
                      "start_seqno": request.get("start_seqno"), "vbucket_uuid": request.get("vbucket_uuid"),
                      "snap_start_seqno": request.get("snap_start_seqno"),
                      "snap_end_seqno": request.get("snap_end_seqno"), "rollback_seqno": answer["rollback_seqno"],
                      "retried": settled is not None,
                      "explanation": (settled or answer)["rollback"]})
    return found


def latency(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stream request to response latency per connection (ms): count, mean, p99 and maximum."""
    per_connection: dict[str, list[float]] = {}
    for row in requests:
        if row["direction"] == "server>client" and row["latency_ms"] is not None:
            per_connection.setdefault(row["connection"], []).append(row["latency_ms"])
    out = []
    for connection, values in sorted(per_connection.items()):
        values.sort()
        out.append({"connection": connection, "responses": len(values),
                    "mean_ms": round(sum(values) / len(values), 3),
                    "p99_ms": values[min(len(values) - 1, max(0, math.ceil(0.99 * len(values)) - 1))],
                    "max_ms": values[-1]})
    return out


def flow_control(seconds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per connection, from the per-second rows: the negotiated window, the most bytes left
    unacknowledged, acks, messages above the window, stalls and the longest, and whether the window was
    still full when the capture ended (a stuck stream: nothing acknowledges it)."""
    out: dict[str, dict[str, Any]] = {}
    for row in seconds:  # in (connection, second) order
        summary = out.setdefault(row["connection"], {"connection": row["connection"], "buffer_size": None,
                                                     "max_unacked": None, "acks": 0, "exceeded": 0, "stalls": 0,
                                                     "longest_stall_ms": None})
        if row["window_last"] is not None:
            summary["buffer_size"] = max(summary["buffer_size"] or 0, row["window_last"])
        if row["unacked"] is not None:
            summary["max_unacked"] = max(summary["max_unacked"] or 0, row["unacked"])
        summary["acks"] += row["acks"]
        summary["exceeded"] += row["exceeded"]
        summary["stalls"] += row["stalls"]
        if row["longest_stall_ms"] is not None:
            summary["longest_stall_ms"] = max(summary["longest_stall_ms"] or 0, row["longest_stall_ms"])
        summary["unacked_at_end"] = row["unacked_last"]
        summary["stuck_at_end"] = bool(row["window_last"]) and (row["unacked_last"] or 0) >= row["window_last"]
    return list(out.values())


# Time buckets of the plots' series over the capture's span: about a point per pixel of a plot's width.
PLOT_POINTS: Final = 2000
# The narrowest bucket (seconds): a pcap's timestamps are microseconds, so a finer one holds nothing more.
MIN_BUCKET: Final = 1e-6


def _bucket(frame: Any, bounds: tuple[float, float], points: int) -> Any:
    from pyspark.sql import functions as f  # noqa: PLC0415

    low, high = bounds
    width = max((high - low) / points, MIN_BUCKET)
    return frame.withColumn("bucket", f.floor((f.col("ts") - low) / width))


def progress(data: Any, bounds: tuple[float, float] | None, points: int = PLOT_POINTS) -> list[dict[str, Any]]:
    """Highest seqno per vbucket per time bucket (for the seqno-progress plot), at most ``points`` buckets
    over the capture's span (``bounds``: its first and last message's times)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    if bounds is None:
        return []
    rows = _plain(_bucket(data.where(f.col("item")), bounds, points)
                  .groupBy("vb", "bucket").agg(f.max("ts").alias("ts"), f.max("seqno").alias("seqno")).collect())
    rows.sort(key=lambda r: (r["vb"], r["ts"]))
    return rows


def unacked(data: Any, bounds: tuple[float, float] | None, points: int = PLOT_POINTS) -> list[dict[str, Any]]:
    """Most unacknowledged bytes per connection per time bucket (for the unacked-bytes plot): finer than the
    per-second rows, so that a short capture's flow control shows its shape."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    if bounds is None:
        return []
    rows = _plain(_bucket(data.where(f.col("unacked_bytes").isNotNull()), bounds, points)
                  .groupBy("connection", "bucket")
                  .agg(f.max("ts").alias("ts"), f.max("unacked_bytes").alias("unacked")).collect())
    rows.sort(key=lambda r: (r["connection"], r["ts"]))
    return rows


def report(frame: Any, partials: Partials, *, plots: bool) -> dict[str, Any]:
    """Every analysis of a capture: what the decode tasks gathered (``partials``), merged, and the queries
    over the messages dataset (``frame``) that need every row: duplicates (where they can be), progress."""
    seconds, per_vbucket = merge(partials)
    out: dict[str, Any] = {
        "messages": sum(row["messages"] for row in seconds), "vbuckets": per_vbucket,
        "gaps": sorted(partials.gaps, key=lambda r: (r["connection"], r["vb"], r["by_seqno"]))[:ROWS_LIMIT],
        "duplicates": duplicates(prepared(frame), per_vbucket),
        "rollbacks": rollbacks(sorted(partials.requests, key=lambda r: (r["ts"], r["connection"], r["sequence"]))),
        "latency": latency(partials.requests), "per_second": seconds, "flow_control": flow_control(seconds),
        "stalls": sorted(partials.stalls, key=lambda r: (r["connection"], r["ts"]))[:ROWS_LIMIT],
    }
    # a list that reached the limit may have been cut (its per-vbucket counts are whole): said, not silent
    out["rows_limit"] = ROWS_LIMIT
    out["lists_at_limit"] = [name for name in LISTS if len(out[name]) >= ROWS_LIMIT]
    if plots:  # the plots' series: not in the JSON report (the caller pops them)
        data = prepared(frame)
        bounds = (partials.span[0], partials.span[1]) if partials.span else None
        out.update(span=bounds, progress=progress(data, bounds), unacked=unacked(data, bounds))
    return out
