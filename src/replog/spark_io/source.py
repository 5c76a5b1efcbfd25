"""The `replog` data source: Spark's entry point, handing out readers and writers.

Options are checked where Spark first hands them over: schema() runs at load(), so a bad read
option fails there, naming it; reader() and streamReader() add what only a batch or only a
streaming query refuses (endingOffsets in a stream, startingOffsets=latest in a batch); the
writers check their options and the data's columns when the write starts, before any task.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .options import SOURCE, OptionError, parse_read_options, parse_write_options
from .reader import BatchReader, StreamReader
from .schema import source_schema
from .writer import BatchWriter, StreamWriter, validate_input


class ReplogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE

    def schema(self) -> StructType:
        return source_schema(parse_read_options(self.options, streaming=None).include_headers)

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        if overwrite:
            raise OptionError("save mode Overwrite is not allowed: a log is only appended to; use mode('append')")
        options = parse_write_options(self.options)
        validate_input(schema, options)
        return BatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        # Complete mode (overwrite) appends the whole result each micro-batch, as Kafka's sink does.
        options = parse_write_options(self.options)
        validate_input(schema, options)
        return StreamWriter(options)
