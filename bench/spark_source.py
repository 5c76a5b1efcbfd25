"""Rows per second of the replog streaming source in Spark, beside Spark's built-in rate source.

    .venv/bin/python bench/spark_source.py [--num-records N] [--record-size BYTES] [--partitions P]

Starts one fresh broker, fills topic `spark-bench` (P partitions) with N records of BYTES bytes
through `replog perf produce`, then in one local[2] SparkSession runs streaming queries into
Spark's `noop` sink, each reading all N rows:

- replog, one micro-batch (Trigger.AvailableNow, no read limit);
- replog, micro-batches of 100k rows (maxOffsetsPerTrigger=100000);
- rate-micro-batch, one batch of N rows and batches of 100k rows (Spark generating rows, no I/O).

Each line gives rows, micro-batches, the time Spark spent in them (the sum of their
triggerExecution durations) and rows/s over that time, then where that time went (Spark's
progress phases; addBatch is the reading and writing). A small batch read first warms up Spark's
Python workers, whose start would otherwise be charged to the first query. Figures are printed, never asserted;
Spark, the broker and the Python workers share this machine's CPUs (see `nproc`).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.broker_process import BrokerProcess  # noqa: E402

TOPIC = "spark-bench"
ADMIN_TIMEOUT_S = 30
QUERY_TIMEOUT_S = 1800
SMALL_BATCH_ROWS = 100_000


def fill(bootstrap: str, partitions: int, count: int, size: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(ADMIN_TIMEOUT_S)
    done = subprocess.run([sys.executable, "-m", "replog", "perf", "produce", "--bootstrap-server", bootstrap, "--topic", TOPIC,
                           "--num-records", str(count), "--record-size", str(size), "--acks", "1"],
                          capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"replog perf produce failed: {done.stderr.strip()}")
    summary = done.stdout.strip().rpartition("\n")[2]  # progress lines come before it
    print(f"filled: {summary}", flush=True)


def session():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import replog.spark_io

    spark = (SparkSession.builder.master("local[2]").appName("replog-bench")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("FATAL")  # stopping the rate queries cancels a batch in flight: noise, not failure
    replog.spark_io.register(spark)
    return spark


def measure(label: str, frame, checkpoint: pathlib.Path, rows: int, available_now: bool) -> None:
    """Run `frame` into the noop sink until `rows` rows went through; print the figures."""
    writer = frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
    query = (writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")).start()
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    try:
        # AvailableNow ends by itself; the rate source runs until enough rows went through.
        while query.isActive and _rows(query) < rows and time.monotonic() < deadline:  # bounded by the deadline
            query.awaitTermination(0.2)
    finally:
        query.stop()
    if query.exception() is not None or _rows(query) < rows:
        raise SystemExit(f"{label}: {query.exception() or f'fewer than {rows} rows'}")
    batches = [progress for progress in query.recentProgress if progress["numInputRows"] > 0]
    spent_s = sum(progress["durationMs"]["triggerExecution"] for progress in batches) / 1000
    read = sum(progress["numInputRows"] for progress in batches)
    print(f"{label:<44} {read:>9} rows {len(batches):>3} batches {spent_s:8.2f} s {read / spent_s:>12,.0f} rows/s", flush=True)
    phases = {name: sum(progress["durationMs"].get(name, 0) for progress in batches) / 1000
              for name in ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")}
    print(" " * 4 + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in phases.items()), flush=True)


def _rows(query) -> int:
    return sum(progress["numInputRows"] for progress in query.recentProgress)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    options = parser.parse_args()
    rows = options.num_records
    with tempfile.TemporaryDirectory(prefix="replog-bench-") as work_dir:
        work = pathlib.Path(work_dir)
        broker = BrokerProcess(work / "data")
        broker.start()
        try:
            fill(broker.bootstrap, options.partitions, rows, options.record_size)
            spark = session()
            try:
                def replog_stream(**extra):
                    reader = (spark.readStream.format("replog").option("kafka.bootstrap.servers", broker.bootstrap)
                              .option("subscribe", TOPIC).option("startingOffsets", "earliest"))
                    for name, value in extra.items():
                        reader = reader.option(name, value)
                    return reader.load()

                def rate(rows_per_batch: int):
                    return spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch) \
                        .option("numPartitions", 2).load()

                # Warm-up: the first Python tasks start Spark's Python workers and import pyarrow and
                # replog (seconds on a small machine); the figures below are of warm workers.
                ending = json.dumps({TOPIC: {str(index): 1000 for index in range(options.partitions)}})
                spark.read.format("replog").option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", TOPIC) \
                    .option("endingOffsets", ending).load().count()
                print(f"{rows} records of {options.record_size} bytes, {options.partitions} partitions, local[2], nproc={os.cpu_count()}")
                measure("replog, one micro-batch", replog_stream(), work / "c1", rows, available_now=True)
                measure(f"replog, maxOffsetsPerTrigger={SMALL_BATCH_ROWS}", replog_stream(maxOffsetsPerTrigger=SMALL_BATCH_ROWS),
                        work / "c2", rows, available_now=True)
                measure("rate-micro-batch, one micro-batch", rate(rows), work / "c3", rows, available_now=False)
                measure(f"rate-micro-batch, rowsPerBatch={SMALL_BATCH_ROWS}", rate(SMALL_BATCH_ROWS), work / "c4", rows, available_now=False)
            finally:
                spark.stop()
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
