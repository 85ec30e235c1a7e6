"""The analyses of ``dcpctl analyze``: Spark DataFrame queries over the messages dataset.

Each returns plain rows (lists of dicts) for the table, the JSON and the plots. The stream checks the
capture decoder already made (seqno_backwards, seqno_outside_snapshot, capture_gap, rollback, ...) are
diagnostics on the rows, so the analyses group, count and order them rather than redo them.
"""

from __future__ import annotations

from typing import Any

ITEMS = ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")
PUSHED = ("DCP_SNAPSHOT_MARKER", "DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION", "DCP_STREAM_END",
          "DCP_SYSTEM_EVENT", "DCP_SEQNO_ADVANCED", "DCP_OSO_SNAPSHOT")


def _plain(rows: list[Any]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        item = row.asDict()
        out.append({k: (int(v) if hasattr(v, "as_integer_ratio") and not isinstance(v, float) else v)
                    for k, v in item.items()})
    return out


def items_of(frame: Any) -> Any:
    from pyspark.sql import functions as f  # noqa: PLC0415

    items = f.col("opcode").isin(*ITEMS) & (f.col("direction") == "server>client") & f.col("by_seqno").isNotNull()
    return frame.where(items).withColumn("vb", f.coalesce("stream_vbucket", "vbucket"))


def vbuckets(frame: Any) -> list[dict[str, Any]]:
    """Per connection and vbucket: items, seqno range, distinct seqnos, duplicates, checks that failed."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    items = items_of(frame)
    return _plain(items.groupBy("connection", "vb").agg(
        f.count("*").alias("items"), f.min("by_seqno").alias("first_seqno"), f.max("by_seqno").alias("last_seqno"),
        f.countDistinct("by_seqno").alias("distinct_seqnos"),
        f.sum(f.when(f.array_contains("diagnostics", "seqno_backwards"), 1).otherwise(0)).alias("backwards"),
        f.sum(f.when(f.array_contains("diagnostics", "seqno_outside_snapshot"), 1).otherwise(0))
        .alias("outside_snapshot"),
    ).withColumn("duplicates", f.col("items") - f.col("distinct_seqnos"))
        .orderBy("connection", "vb").collect())


def gaps(frame: Any, limit: int = 1000) -> list[dict[str, Any]]:
    """Seqno gaps within a stream, each with what explains it: bytes the capture lost, an item outside its
    snapshot (suspicious), or nothing wrong (deduplication or filtering: expected)."""
    from pyspark.sql import Window  # noqa: PLC0415
    from pyspark.sql import functions as f  # noqa: PLC0415

    window = Window.partitionBy("connection", "vb").orderBy("offset")
    items = items_of(frame).withColumn("previous", f.lag("by_seqno").over(window))
    found = items.where(f.col("previous").isNotNull() & (f.col("by_seqno") > f.col("previous") + 1))
    found = found.withColumn("missing", f.col("by_seqno") - f.col("previous") - 1).withColumn(
        "kind",
        f.when(f.array_contains("diagnostics", "capture_gap"), f.lit("suspicious: bytes missing from the capture"))
        .when(f.array_contains("diagnostics", "seqno_outside_snapshot"),
              f.lit("suspicious: the item is outside its snapshot"))
        .otherwise(f.lit("expected: deduplication or filtered collections")))
    return _plain(found.select("connection", "vb", "previous", "by_seqno", "missing", "kind", "ts")
                  .orderBy("connection", "vb", "by_seqno").limit(limit).collect())


def duplicates(frame: Any, limit: int = 1000) -> list[dict[str, Any]]:
    """The same (vbucket, seqno) delivered more than once, across every connection (resumed streams)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    return _plain(items_of(frame).groupBy("vb", "by_seqno").agg(
        f.count("*").alias("times"), f.collect_set("connection").alias("connections"), f.first("key").alias("key"))
        .where(f.col("times") > 1).orderBy("vb", "by_seqno").limit(limit).collect())


def rollbacks(frame: Any) -> list[dict[str, Any]]:
    """Every Rollback answer: when, where, from what to what, and the explanation on the retry."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    answers = frame.where((f.col("opcode") == "DCP_STREAM_REQ") & (f.col("status") == "Rollback"))
    requests = frame.where((f.col("opcode") == "DCP_STREAM_REQ") & (f.col("magic") == "ClientRequest")) \
        .select(f.col("connection").alias("c"), f.col("opaque").alias("o"), f.col("offset").alias("request_offset"),
                f.col("start_seqno").alias("requested_start"), f.col("vbucket_uuid").alias("requested_uuid"),
                f.col("vbucket").alias("requested_vbucket"), f.col("ts").alias("requested_ts"))
    joined = answers.join(requests, (answers.connection == requests.c) & (answers.opaque == requests.o)
                          & (requests.requested_ts <= answers.ts), "left")
    return _plain(joined.select("ts", "connection", f.coalesce("stream_vbucket", "requested_vbucket").alias("vb"),
                                f.col("requested_start").alias("start_seqno"),
                                f.col("requested_uuid").alias("vbucket_uuid"), "rollback_seqno")
                  .orderBy("ts").collect())


def latency(frame: Any) -> list[dict[str, Any]]:
    """Stream request to response latency per connection (ms)."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    answers = frame.where((f.col("opcode") == "DCP_STREAM_REQ") & (f.col("magic") == "ClientResponse")
                          & f.col("latency_ms").isNotNull())
    return _plain(answers.groupBy("connection").agg(
        f.count("*").alias("responses"), f.round(f.avg("latency_ms"), 3).alias("mean_ms"),
        f.percentile_approx("latency_ms", 0.99).alias("p99_ms"), f.max("latency_ms").alias("max_ms"))
        .orderBy("connection").collect())


def throughput(frame: Any) -> list[dict[str, Any]]:
    """Items and bytes per second per connection."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    return _plain(items_of(frame).withColumn("second", f.floor("ts")).groupBy("connection", "second").agg(
        f.count("*").alias("items"), f.sum(f.col("total_body_length") + 24).alias("bytes"))
        .orderBy("connection", "second").collect())


def flow_control(frame: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Unacknowledged bytes per connection (pushed bytes minus buffer acks, in capture order) against the
    negotiated window: (per connection summary, per second maximum for the plot)."""
    from pyspark.sql import Window  # noqa: PLC0415
    from pyspark.sql import functions as f  # noqa: PLC0415

    pushed = (f.col("direction") == "server>client") & (f.col("magic") == "ClientRequest") \
        & f.col("opcode").isin(*PUSHED)
    acked = (f.col("direction") == "client>server") & (f.col("opcode") == "DCP_BUFFER_ACKNOWLEDGEMENT")
    delta = f.when(pushed, f.col("total_body_length") + 24).when(acked, -f.col("bytes_to_ack")).otherwise(0)
    window = Window.partitionBy("connection").orderBy("ts", "frames").rowsBetween(Window.unboundedPreceding, 0)
    running = frame.withColumn("unacked", f.greatest(f.lit(0), f.sum(delta).over(window)))
    controls = frame.where((f.col("opcode") == "DCP_CONTROL") & (f.col("key") == "connection_buffer_size")
                           & (f.col("magic") == "ClientRequest")) \
        .select(f.col("connection").alias("c"),
                f.get_json_object("record", "$.value").cast("long").alias("buffer_size"))
    summary = running.groupBy("connection").agg(
        f.max("unacked").alias("max_unacked"),
        f.sum(f.when(f.array_contains("diagnostics", "flow_control_exceeded"), 1).otherwise(0)).alias("exceeded"),
        f.sum(f.when(acked, 1).otherwise(0)).alias("acks"))
    summary = summary.join(controls, summary.connection == controls.c, "left").drop("c")
    per_second = running.withColumn("second", f.floor("ts")).groupBy("connection", "second") \
        .agg(f.max("unacked").alias("unacked")).orderBy("connection", "second")
    return _plain(summary.orderBy("connection").collect()), _plain(per_second.collect())


def progress(frame: Any, points: int = 2000) -> list[dict[str, Any]]:
    """Highest seqno per vbucket per time bucket (for the seqno-progress plot), at most ``points`` buckets."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    items = items_of(frame)
    bounds = items.agg(f.min("ts").alias("lo"), f.max("ts").alias("hi")).collect()[0]
    if bounds["lo"] is None:
        return []
    width = max((bounds["hi"] - bounds["lo"]) / points, 1e-6)
    return _plain(items.withColumn("bucket", f.floor((f.col("ts") - bounds["lo"]) / width))
                  .groupBy("vb", "bucket").agg(f.max("ts").alias("ts"), f.max("by_seqno").alias("seqno"))
                  .orderBy("vb", "ts").collect())
