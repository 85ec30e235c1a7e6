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

from typing import Any, Final

ITEMS: Final = ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")
ROWS_LIMIT: Final = 1000  # rows of a list-like analysis kept in the report (the dataset has them all)


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


def _has(name: str) -> Any:
    from pyspark.sql import functions as f  # noqa: PLC0415

    return f.array_contains("names", name)


def vbuckets(items: Any) -> list[dict[str, Any]]:
    """Per connection and vbucket: items, seqno range, and the stream checks that failed."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    def count(condition: Any) -> Any:
        return f.sum(f.when(condition, 1).otherwise(0))

    return _plain(items.groupBy("connection", "vb").agg(
        f.count("*").alias("items"), f.min("seqno").alias("first_seqno"), f.max("seqno").alias("last_seqno"),
        count(f.col("seqno") == f.col("previous")).alias("repeated"),
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


def duplicates(items: Any, limit: int = ROWS_LIMIT) -> list[dict[str, Any]]:
    """The same (vbucket, seqno) delivered more than once, on any connections (resumed or repeated streams)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    return _plain(items.where(f.col("seqno").isNotNull()).groupBy("vb", "seqno").agg(
        f.count("*").alias("times"), f.collect_set("connection").alias("connections"), f.first("key").alias("key"))
        .where(f.col("times") > 1).select("vb", f.col("seqno").alias("by_seqno"), "times", "key", "connections")
        .orderBy("vb", "by_seqno").limit(limit).collect())


def rollbacks(frame: Any) -> list[dict[str, Any]]:
    """Every Rollback answer: when, on which connection, from what to what, and the rollback engine's
    explanation (the tracker's, on the response that opened the stream after the retry; or, when the
    capture has no retry, on the answer itself)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    responses = frame.where((f.col("opcode") == "DCP_STREAM_REQ") & (f.col("direction") == "server>client"))
    answers = responses.where(f.col("status") == "Rollback")
    requests = frame.where((f.col("opcode") == "DCP_STREAM_REQ") & (f.col("direction") == "client>server")) \
        .select(f.col("connection").alias("c"), f.col("offset").alias("o"),
                f.col("start_seqno").alias("requested_start"), f.col("vbucket_uuid").alias("requested_uuid"),
                f.col("snap_start_seqno").alias("requested_snap_start"),
                f.col("snap_end_seqno").alias("requested_snap_end"), f.col("vbucket").alias("requested_vbucket"))
    # the tracker paired each response with its request (request_offset): the join is exact
    joined = answers.join(requests, (answers.connection == requests.c) & (answers.request_offset == requests.o),
                          "left")
    found = _plain(joined.select(
        "ts", "connection", f.coalesce("stream_vbucket", "requested_vbucket").alias("vb"),
        f.col("requested_start").alias("start_seqno"), f.col("requested_uuid").alias("vbucket_uuid"),
        f.col("requested_snap_start").alias("snap_start_seqno"), f.col("requested_snap_end").alias("snap_end_seqno"),
        "rollback_seqno", _rollback_message().alias("answer"))
        .orderBy("ts").collect())
    # the stream openings that settled a negotiation: few, so they are paired with the answers here
    settled = _plain(responses.where((f.col("status") == "Success") & f.array_contains(_names(), "rollback"))
                     .select("ts", "connection", f.col("stream_vbucket").alias("vb"),
                             _rollback_message().alias("message"))
                     .orderBy("ts").collect())
    for answer in found:
        later = [s for s in settled if s["connection"] == answer["connection"] and s["vb"] == answer["vb"]
                 and s["ts"] >= answer["ts"]]
        answer["explanation"] = later[0]["message"] if later else answer.pop("answer")
        answer.pop("answer", None)
        answer["retried"] = bool(later)
    return found


def _rollback_message() -> Any:
    """The message of a row's ``rollback`` diagnostic, or null."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    return f.try_element_at(f.filter("diagnostics", lambda d: d["name"] == "rollback"), f.lit(1))["message"]


def latency(frame: Any) -> list[dict[str, Any]]:
    """Stream request to response latency per connection (ms)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    answers = frame.where((f.col("opcode") == "DCP_STREAM_REQ") & (f.col("direction") == "server>client")
                          & f.col("latency_ms").isNotNull())
    return _plain(answers.groupBy("connection").agg(
        f.count("*").alias("responses"), f.round(f.avg("latency_ms"), 3).alias("mean_ms"),
        f.percentile_approx("latency_ms", 0.99).alias("p99_ms"), f.max("latency_ms").alias("max_ms"))
        .orderBy("connection").collect())


def per_second(frame: Any) -> list[dict[str, Any]]:
    """Per connection and second: items, bytes the producer pushed, most unacknowledged bytes (the
    throughput and flow-control plots)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    pushed = f.col("direction") == "server>client"
    item = pushed & f.col("opcode").isin(*ITEMS)
    return _plain(frame.groupBy("connection", f.floor("ts").alias("second")).agg(
        f.sum(f.when(item, 1).otherwise(0)).alias("items"),
        f.sum(f.when(pushed, f.col("total_body_length") + 24).otherwise(0)).alias("bytes"),
        f.max("unacked_bytes").alias("unacked")).orderBy("connection", "second").collect())


def flow_control(frame: Any, stall_ms: float, limit: int = ROWS_LIMIT) -> tuple[list[dict[str, Any]],
                                                                              list[dict[str, Any]]]:
    """Per connection: the negotiated window, the most bytes left unacknowledged, acks, messages above the
    window, stalls (the producer blocked by a full window for at least ``stall_ms``) and whether the window
    was still full when the capture ended (a stuck stream); and the stalls themselves."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    acked = (f.col("direction") == "client>server") & (f.col("opcode") == "DCP_BUFFER_ACKNOWLEDGEMENT")
    stalled = f.col("blocked_ms") >= stall_ms
    summary = _plain(frame.groupBy("connection").agg(
        f.max("buffer_size").alias("buffer_size"), f.max("unacked_bytes").alias("max_unacked"),
        f.sum(f.when(acked, 1).otherwise(0)).alias("acks"),
        f.sum(f.when(f.array_contains(_names(), "flow_control_exceeded"), 1).otherwise(0)).alias("exceeded"),
        f.sum(f.when(stalled, 1).otherwise(0)).alias("stalls"),
        f.round(f.max("blocked_ms"), 3).alias("longest_stall_ms"),
        f.max_by("unacked_bytes", f.struct("ts", "offset")).alias("unacked_at_end"),
        f.max_by("buffer_size", f.struct("ts", "offset")).alias("window_at_end"),
    ).orderBy("connection").collect())
    for row in summary:
        window = row.pop("window_at_end")
        row["stuck_at_end"] = bool(window) and (row["unacked_at_end"] or 0) >= window
    stalls = _plain(frame.where(stalled).select(
        "connection", "ts", f.col("blocked_ms").alias("stalled_ms"), "unacked_bytes", "buffer_size")
        .orderBy("connection", "ts").limit(limit).collect())
    return summary, stalls


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
    flow, stalls = flow_control(frame, stall_ms)
    out: dict[str, Any] = {
        "messages": frame.count(), "vbuckets": vbuckets(items), "gaps": gaps(items),
        "duplicates": duplicates(items), "rollbacks": rollbacks(frame), "latency": latency(frame),
        "per_second": per_second(frame), "flow_control": flow, "stalls": stalls,
    }
    if plots:
        out["progress"] = progress(items)
    return out
