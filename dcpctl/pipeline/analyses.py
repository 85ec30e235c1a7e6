"""The analyses of ``dcpctl analyze``: Spark DataFrame queries over the messages dataset.

Each returns plain rows (lists of dicts) for the tables, the JSON and the plots. What the capture decoder
already established in stream order is in the rows: the tracker's checks as diagnostics
(``seqno_backwards``, ``seqno_outside_snapshot``, ``capture_gap``, ``rollback``...), the item before each
item (``previous_seqno``), the unacknowledged bytes and how long a full window blocked the producer
(``unacked_bytes``, ``blocked_ms``). So the queries filter, group and count; none sorts a whole capture.

Seqnos are read as 64-bit signed integers, as kv_engine holds them; a value above 2^63-1 (never a real
seqno) is left out of the seqno analyses and counted as ``invalid_seqnos``.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any, Final

ITEMS: Final = ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")
ROWS_LIMIT: Final = 1000  # rows of a list-like analysis kept in the report (the dataset has them all)
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


def _names() -> Any:
    from pyspark.sql import functions as f  # noqa: PLC0415

    return f.col("diagnostics.name")


def items_of(frame: Any) -> Any:
    """Items the producer sent, with ``vb`` (the stream's vbucket) and ``seqno``/``previous`` as longs."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    items = f.col("opcode").isin(*ITEMS) & (f.col("direction") == "server>client") & f.col("by_seqno").isNotNull()
    return frame.where(items).select(
        "ts", "connection", "offset", "key", "total_body_length", "snapshot_start_seqno", "snapshot_end_seqno",
        f.coalesce("stream_vbucket", "vbucket").alias("vb"), f.col("by_seqno").try_cast("long").alias("seqno"),
        f.col("previous_seqno").try_cast("long").alias("previous"), _names().alias("names"))


def _count(condition: Any) -> Any:
    """How many rows a condition holds for (an aggregate)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    return f.sum(f.when(condition, 1).otherwise(0))


def _has(name: str) -> Any:
    from pyspark.sql import functions as f  # noqa: PLC0415

    return f.array_contains("names", name)


def vbuckets(items: Any) -> list[dict[str, Any]]:
    """Per connection and vbucket: items, seqno range, and the stream checks that failed."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    count = _count
    return _plain(items.groupBy("connection", "vb").agg(
        f.count("*").alias("items"), f.min("seqno").alias("first_seqno"), f.max("seqno").alias("last_seqno"),
        count(f.col("seqno") <= f.col("previous")).alias("repeated"),
        count(_has("seqno_backwards")).alias("backwards"),
        count(_has("seqno_outside_snapshot")).alias("outside_snapshot"),
        count(_has("item_before_marker")).alias("before_marker"),
        count(f.col("seqno").isNull()).alias("invalid_seqnos"),
    ).orderBy("connection", "vb").collect())


def gaps(items: Any, limit: int = ROWS_LIMIT) -> list[dict[str, Any]]:
    """Seqno gaps between consecutive items of a connection's vbucket, each with what explains it: bytes the
    capture lost or an item outside its snapshot (suspicious), a gap inside or between snapshots (expected:
    deduplication, or filtered collections)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    found = items.where(f.col("seqno") > f.col("previous") + 1) \
        .withColumn("missing", f.col("seqno") - f.col("previous") - 1).withColumn(
        "kind",
        f.when(_has("capture_gap"), f.lit("suspicious: bytes missing from the capture"))
        .when(_has("seqno_outside_snapshot"), f.lit("suspicious: the item is outside its snapshot"))
        .otherwise(f.lit("expected: deduplication or filtered collections")))
    return _plain(found.select("connection", "vb", "previous", f.col("seqno").alias("by_seqno"), "missing", "kind",
                               "ts").orderBy("connection", "vb", "by_seqno").limit(limit).collect())


def duplicates(items: Any, per_vbucket: list[dict[str, Any]], limit: int = ROWS_LIMIT) -> list[dict[str, Any]]:
    """The same (vbucket, seqno) delivered more than once, on any connections (resumed or repeated streams).

    Counting every seqno of a big capture would be the costliest query of all, and duplicates are rare. So
    :func:`vbuckets`'s rows say where they can be: a connection's vbucket whose seqnos went back
    (``repeated``), or two connections whose seqno ranges for a vbucket overlap. Only those vbuckets and
    ranges are counted exactly; a capture without either costs nothing here."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    ranges: dict[int, list[tuple[int, int, bool]]] = {}
    for row in per_vbucket:
        if row["first_seqno"] is not None:
            ranges.setdefault(row["vb"], []).append((row["first_seqno"], row["last_seqno"], bool(row["repeated"])))
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
    where = f.col("seqno").isNotNull()
    if len(suspects) <= MAX_SUSPECT_RANGES:
        where = where & functools.reduce(operator.or_, [(f.col("vb") == vb) & f.col("seqno").between(low, high)
                                                        for vb, low, high in suspects])
    return _plain(items.where(where).groupBy("vb", "seqno").agg(
        f.count("*").alias("times"), f.collect_set("connection").alias("connections"), f.first("key").alias("key"))
        .where(f.col("times") > 1).select("vb", f.col("seqno").alias("by_seqno"), "times", "key", "connections")
        .orderBy("vb", "by_seqno").limit(limit).collect())


def stream_requests(frame: Any) -> list[dict[str, Any]]:
    """Every DCP_STREAM_REQ row, both directions, with its rollback diagnostic's message: a capture has a few
    per vbucket and connection, so the rollback and latency analyses work on them in the driver."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    rollback = f.try_element_at(f.filter("diagnostics", lambda d: d["name"] == "rollback"), f.lit(1))["message"]
    return _plain(frame.where(f.col("opcode") == "DCP_STREAM_REQ").select(
        "ts", "connection", "direction", "offset", "vbucket", "status", "start_seqno", "vbucket_uuid",
        "snap_start_seqno", "snap_end_seqno", "rollback_seqno", "stream_vbucket", "latency_ms", "request_offset",
        rollback.alias("rollback")).orderBy("ts", "offset").collect())


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


def per_second(frame: Any, stall_ms: float) -> list[dict[str, Any]]:
    """One pass over every row, per connection and second: messages, items and bytes the producer pushed,
    the most unacknowledged bytes and those at the second's end, the window, acks, messages above the
    window, and stalls (the producer blocked by a full window for at least ``stall_ms``). The throughput,
    the flow-control summary and the plots are made from these rows."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    pushed = f.col("direction") == "server>client"
    item = pushed & f.col("opcode").isin(*ITEMS)
    acked = (f.col("direction") == "client>server") & (f.col("opcode") == "DCP_BUFFER_ACKNOWLEDGEMENT")
    order = "sequence"  # exact within a connection, and a long: far cheaper than ordering by (ts, offset)
    count = _count
    return _plain(frame.groupBy("connection", f.floor("ts").alias("second")).agg(
        f.count("*").alias("messages"), count(item).alias("items"),
        f.sum(f.when(pushed, f.col("total_body_length") + 24).otherwise(0)).alias("bytes"),
        f.max("unacked_bytes").alias("unacked"), f.max_by("unacked_bytes", order).alias("unacked_last"),
        f.max_by("buffer_size", order).alias("window_last"), count(acked).alias("acks"),
        count(f.array_contains(_names(), "flow_control_exceeded")).alias("exceeded"),
        count(f.col("blocked_ms") >= stall_ms).alias("stalls"), f.max("blocked_ms").alias("longest_stall_ms"),
    ).orderBy("connection", "second").collect())


def flow_control(seconds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per connection, from :func:`per_second`'s rows: the negotiated window, the most bytes left
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


def stalls(frame: Any, stall_ms: float, limit: int = ROWS_LIMIT) -> list[dict[str, Any]]:
    """Each stall of at least ``stall_ms``: connection, when it ended, how long, the unacknowledged bytes
    and the window."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    return _plain(frame.where(f.col("blocked_ms") >= stall_ms).select(
        "connection", "ts", f.col("blocked_ms").alias("stalled_ms"), "unacked_bytes", "buffer_size")
        .orderBy("connection", "ts").limit(limit).collect())


def progress(items: Any, points: int = 2000) -> list[dict[str, Any]]:
    """Highest seqno per vbucket per time bucket (for the seqno-progress plot), at most ``points`` buckets."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    bounds = items.agg(f.min("ts").alias("lo"), f.max("ts").alias("hi")).collect()[0]
    if bounds["lo"] is None:
        return []
    width = max((bounds["hi"] - bounds["lo"]) / points, 1e-6)
    return _plain(items.withColumn("bucket", f.floor((f.col("ts") - bounds["lo"]) / width))
                  .groupBy("vb", "bucket").agg(f.max("ts").alias("ts"), f.max("seqno").alias("seqno"))
                  .orderBy("vb", "ts").collect())


def report(frame: Any, *, stall_ms: float, plots: bool) -> dict[str, Any]:
    """Every analysis of a messages dataset, as the report ``analyze`` prints."""
    items = items_of(frame)
    seconds = per_second(frame, stall_ms)
    per_vbucket = vbuckets(items)
    requests = stream_requests(frame)
    out: dict[str, Any] = {
        "messages": sum(row["messages"] for row in seconds), "vbuckets": per_vbucket, "gaps": gaps(items),
        "duplicates": duplicates(items, per_vbucket), "rollbacks": rollbacks(requests),
        "latency": latency(requests), "per_second": seconds, "flow_control": flow_control(seconds),
        "stalls": stalls(frame, stall_ms),
    }
    if plots:
        out["progress"] = progress(items)
    return out
