"""Apache Spark source and sink for replog topics, through PySpark's Python Data Source API
(PySpark 4.x): `spark.read`/`readStream` and `df.write`/`writeStream` with format "replog", the
schema and the options of Spark's built-in Kafka source and sink.

    import replog.spark_io
    replog.spark_io.register(spark)
    stream = spark.readStream.format("replog").option("kafka.bootstrap.servers", "127.0.0.1:9092") \\
        .option("subscribe", "events").load()

Files: options.py (every option), schema.py (the rows), offsets.py (offset JSON, ranges and
read limits), positions.py (driver-side offset lookups), cluster.py (blocking access to the
brokers over net/client.py), records.py (record batches v2, decoded and encoded), reader.py,
writer.py, source.py (the DataSource). Needs the `spark` extra: pip install 'replog[spark]'.
"""

from __future__ import annotations

from .options import OptionError
from .source import ReplogDataSource

__all__ = ["OptionError", "ReplogDataSource", "register"]


def register(spark) -> None:
    """Make format("replog") available in `spark` (a SparkSession)."""
    spark.dataSource.register(ReplogDataSource)
