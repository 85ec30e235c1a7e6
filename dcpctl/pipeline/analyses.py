"""The analyses of ``dcpctl analyze``: Spark DataFrame queries over the messages dataset.

Each returns plain rows (lists of dicts) for the tables, the JSON and the plots. What the capture decoder
already established in stream order is in the rows: the tracker's checks as diagnostics
(``seqno_backwards``, ``seqno_outside_snapshot``, ``capture_gap``, ``rollback``...), the item before each
item (``previous_seqno``), the unacknowledged bytes and how long a full window blocked the producer
(``unacked_bytes``, ``blocked_ms``). So the queries filter, group and count; none sorts a whole capture.

They are few, because on a dataset of millions of rows a query's cost is mostly reading its columns and,
in a fresh Spark, compiling its plan, not the arithmetic: :func:`overview` is one scan with two grouping
sets (per connection and second, per connection and vbucket); :func:`gaps` and :func:`events` read the
few rows that matter; :func:`duplicates` runs only where per-vbucket ranges say duplicates can be. Results
are small and sorted here, not by Spark (a global sort is one more job).

Seqnos are 64-bit signed integers in the dataset, as kv_engine holds them; one above 2^63-1 on the wire
(never a real seqno) reads as negative there, and is left out of the seqno analyses and counted as
``invalid_seqnos``.
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


def _count(condition: Any) -> Any:
    """How many rows a condition holds for (an aggregate)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    return f.sum(f.when(condition, 1).otherwise(0))


def _has(name: str) -> Any:
    from pyspark.sql import functions as f  # noqa: PLC0415

    return f.array_contains("names", name)


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


def overview(data: Any, stall_ms: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One scan, two grouping sets. Per connection and second, over every row: messages, items and bytes
    the producer pushed, the most unacknowledged bytes and those at the second's end, the window, acks,
    messages above the window, stalls (the producer blocked by a full window for at least ``stall_ms``).
    Per connection and vbucket, over items: count, seqno range, repeats (a seqno not above the one before),
    gaps, and the stream checks that failed. Returns (per second, per vbucket), sorted."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    item = f.col("item")
    pushed = f.col("direction") == "server>client"
    acked = (f.col("direction") == "client>server") & (f.col("opcode") == "DCP_BUFFER_ACKNOWLEDGEMENT")
    seqno = f.when(item, f.col("seqno"))
    rows = _plain(data.groupingSets([("connection", "second"), ("connection", "vb")], "connection", "second", "vb")
                  .agg(f.grouping_id().alias("set"), f.count("*").alias("messages"), _count(item).alias("items"),
                       f.sum(f.when(pushed, f.col("total_body_length") + 24).otherwise(0)).alias("bytes"),
                       f.max("unacked_bytes").alias("unacked"),
                       f.max_by("unacked_bytes", "sequence").alias("unacked_last"),
                       f.max_by("buffer_size", "sequence").alias("window_last"), _count(acked).alias("acks"),
                       _count(_has("flow_control_exceeded")).alias("exceeded"),
                       _count(f.col("blocked_ms") >= stall_ms).alias("stalls"),
                       f.max("blocked_ms").alias("longest_stall_ms"),
                       f.min(seqno).alias("first_seqno"), f.max(seqno).alias("last_seqno"),
                       _count(item & (f.col("seqno") <= f.col("previous"))).alias("repeated"),
                       _count(item & (f.col("seqno") > f.col("previous") + 1)).alias("gaps"),
                       _count(item & _has("seqno_backwards")).alias("backwards"),
                       _count(item & _has("seqno_outside_snapshot")).alias("outside_snapshot"),
                       _count(item & _has("item_before_marker")).alias("before_marker"),
                       _count(item & f.col("seqno").isNull()).alias("invalid_seqnos"))
                  .collect())
    seconds, per_vbucket = [], []
    for row in rows:
        if row.pop("set") == 1:  # vb aggregated away: the (connection, second) set
            seconds.append({k: row[k] for k in ("connection", "second", "messages", "items", "bytes", "unacked",
                                                "unacked_last", "window_last", "acks", "exceeded", "stalls",
                                                "longest_stall_ms")})
        elif row["items"]:
            per_vbucket.append({k: row[k] for k in ("connection", "vb", "items", "first_seqno", "last_seqno",
                                                    "repeated", "gaps", "backwards", "outside_snapshot",
                                                    "before_marker", "invalid_seqnos")})
    seconds.sort(key=lambda r: (r["connection"], r["second"]))
    per_vbucket.sort(key=lambda r: (r["connection"], r["vb"]))
    return seconds, per_vbucket


def gaps(data: Any, limit: int = ROWS_LIMIT) -> list[dict[str, Any]]:
    """Seqno gaps between consecutive items of a connection's vbucket (the first ``limit``; per vbucket
    counts are in :func:`overview`), each with what explains it: bytes the capture lost or an item outside
    its snapshot (suspicious), a gap inside or between snapshots (expected: deduplication, or filtered
    collections)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    found = data.where(f.col("item") & (f.col("seqno") > f.col("previous") + 1)) \
        .withColumn("missing", f.col("seqno") - f.col("previous") - 1).withColumn(
        "kind",
        f.when(_has("capture_gap"), f.lit("suspicious: bytes missing from the capture"))
        .when(_has("seqno_outside_snapshot"), f.lit("suspicious: the item is outside its snapshot"))
        .otherwise(f.lit("expected: deduplication or filtered collections")))
    return _plain(found.select("connection", "vb", "previous", f.col("seqno").alias("by_seqno"), "missing", "kind",
                               "ts").orderBy("connection", "vb", "by_seqno").limit(limit).collect())


def events(frame: Any, stall_ms: float, limit: int = ROWS_LIMIT) -> tuple[list[dict[str, Any]],
                                                                          list[dict[str, Any]]]:
    """The few rows the rest of the report is made of, in one scan: every DCP_STREAM_REQ row (both
    directions, with its rollback diagnostic's message) and the stalls of at least ``stall_ms`` (the first
    ``limit``). Returns (stream requests, stalls), in capture order."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    request = f.col("opcode") == "DCP_STREAM_REQ"
    stalled = f.col("blocked_ms") >= stall_ms
    rollback = f.try_element_at(f.filter("diagnostics", lambda d: d["name"] == "rollback"), f.lit(1))["message"]
    rows = _plain(frame.where(request | stalled).select(
        "ts", "connection", "direction", "offset", "sequence", "opcode", "vbucket", "status", "start_seqno",
        "vbucket_uuid", "snap_start_seqno", "snap_end_seqno", "rollback_seqno", "stream_vbucket", "latency_ms",
        "request_offset", "blocked_ms", "unacked_bytes", "buffer_size", rollback.alias("rollback")).collect())
    rows.sort(key=lambda r: (r["ts"], r["connection"], r["sequence"]))
    requests = [r for r in rows if r["opcode"] == "DCP_STREAM_REQ"]
    stalls = [{"connection": r["connection"], "ts": r["ts"], "stalled_ms": r["blocked_ms"],
               "unacked_bytes": r["unacked_bytes"], "buffer_size": r["buffer_size"]}
              for r in rows if r["blocked_ms"] is not None and r["blocked_ms"] >= stall_ms]
    stalls.sort(key=lambda r: (r["connection"], r["ts"]))
    return requests, stalls[:limit]


def duplicates(data: Any, per_vbucket: list[dict[str, Any]], limit: int = ROWS_LIMIT) -> list[dict[str, Any]]:
    """The same (vbucket, seqno) delivered more than once, on any connections (resumed or repeated streams).

    Counting every seqno of a big capture would be the costliest query of all, and duplicates are rare. So
    :func:`overview`'s rows say where they can be: a connection's vbucket whose seqnos went back
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
    """Per connection, from :func:`overview`'s per-second rows: the negotiated window, the most bytes left
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


def progress(data: Any, seconds: list[dict[str, Any]], points: int = 2000) -> list[dict[str, Any]]:
    """Highest seqno per vbucket per time bucket (for the seqno-progress plot), at most ``points`` buckets
    over the capture's span (known from :func:`overview`'s seconds)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    if not seconds:
        return []
    low = min(r["second"] for r in seconds)
    width = max((max(r["second"] for r in seconds) + 1 - low) / points, 1e-3)
    rows = _plain(data.where(f.col("item")).withColumn("bucket", f.floor((f.col("ts") - low) / width))
                  .groupBy("vb", "bucket").agg(f.max("ts").alias("ts"), f.max("seqno").alias("seqno")).collect())
    rows.sort(key=lambda r: (r["vb"], r["ts"]))
    return rows


def report(frame: Any, *, stall_ms: float, plots: bool) -> dict[str, Any]:
    """Every analysis of a messages dataset, as the report ``analyze`` prints."""
    data = prepared(frame)
    seconds, per_vbucket = overview(data, stall_ms)
    requests, stalled = events(frame, stall_ms)
    out: dict[str, Any] = {
        "messages": sum(row["messages"] for row in seconds), "vbuckets": per_vbucket, "gaps": gaps(data),
        "duplicates": duplicates(data, per_vbucket), "rollbacks": rollbacks(requests), "latency": latency(requests),
        "per_second": seconds, "flow_control": flow_control(seconds), "stalls": stalled,
    }
    if plots:
        out["progress"] = progress(data, seconds)
    return out
