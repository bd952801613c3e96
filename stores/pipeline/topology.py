"""Topology: declare IQv2 stores with PySpark DataFrame code (docs/DESIGN.md §7).

A declaration is checked when it is made, not when the query first runs:
Spark's own errors for a bad streaming plan arrive seconds later, wrapped in
a failed query, so the mistakes we can see from the plan (no key column, a
store name used twice, an output mode the shape cannot use, a column type a
store cannot hold) are raised here with the store named.

Shapes and the store kind each becomes:

- ``table(name, df.groupBy(key).agg(...), key=...)`` → timestamped key-value
  store (update mode). Its record time is the ``timestamp=`` column if given
  (for instance ``F.max("timestamp")``), else the batch's trigger time.
- ``table(name, df.groupBy(F.window(...), key)..., key=..., window="window")``
  → window store (update mode; ``output_mode="append"`` emits only closed
  windows). ``F.session_window`` → session store (append mode only, Spark's rule).
- ``table(name, stream_df, key=...)`` (no aggregation) → the latest value per
  key in log order; a tombstone (a record whose value is null, ``value=None``)
  deletes the key, as in Kafka; a value whose fields are all null is a row of
  nulls (``tombstones="all_null"`` makes it delete, the rule before issue 51).
- ``versioned_table(name, stream_df, key=..., timestamp=...)`` → versioned
  store: every record is a version valid from its event time; tombstones too.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..catalog.schema import StoreKind, StoreSpec
from ..catalog.streams import StreamSpec
from ..log.eventlog import EventLog
from ..log.kafka import KafkaSource
from ..log.source import SourceLog
from .batch_cuts import DEFAULT_MAX_AGE_MS, LEDGER_REF_OPTION, MAX_AGE_OPTION, new_ledger_ref
from .declarations import (
    _UNITS_MS,
    StoreDecl,
    TopologyError,
    _column,
    _is_aggregate,
    _plan_text,
    _require_col,
    _split_having,
    check_tombstones,
    key_names,
)
from .kafka_source import source_options
from .shared_query import DEFAULT_STORES_PER_QUERY
from .stateful_tables import session_table_decl, table_aggregate_decl
from .stream_rows import HEADERS, METADATA_COLUMNS, TOMBSTONE, key_spark_type, parse_value_schema, stream_schema
from .stream_specs import StreamNames

__all__ = ["Topology", "StoreDecl", "TopologyError", "DEFAULT_MAX_RECORDS_PER_BATCH"]

#: No cap by default, as in Spark. A cap bounds the driver's memory for one batch (collected as Arrow,
#: sorted, staged), but each batch over a big state costs Spark a pass over that state: measured (issue 22,
#: 5M events / 3M keys) a 1M-record cap cut ingest from ~75k to ~48k records/s on both sides, bare Spark too.
DEFAULT_MAX_RECORDS_PER_BATCH: int | None = None

_STREAM_IDS = itertools.count(1)
_STREAM_OPT = "iqgate.stream"


class Topology:
    """A set of stores fed by streaming DataFrames over one source (an EventLog, or Kafka).

    ``trigger`` is the micro-batch interval of every store's query
    (``processingTime``); shorter means fresher stores and more batch overhead.
    ``stores_per_query``: stores reading the same stream share one streaming
    query, at most this many per query (``shared_query.py``); 1 gives each
    store its own query.

    ``changelogs``: write every store's changes to ``<application_id>-<store>-changelog``
    on the same log, for standby replicas (``iqgate replica``); on by default.

    ``shared_cuts``: every query of the app ends its micro-batches at cuts from
    one sequence per topic, so stores of different queries pass through the
    same Positions (issue 47, ``batch_cuts.py``); a query ends on a cut
    another recorded only while it is at most ``cut_max_age_ms`` old. False:
    each query ends its batches on its own (Spark's Kafka source's jar always does).
    """

    def __init__(self, spark: SparkSession, log: EventLog | KafkaSource | str, *,
                 trigger: str = "100 milliseconds", stores_per_query: int = DEFAULT_STORES_PER_QUERY,
                 changelogs: bool = True,
                 max_records_per_batch: int | None = DEFAULT_MAX_RECORDS_PER_BATCH,
                 shared_cuts: bool = True, cut_max_age_ms: int = DEFAULT_MAX_AGE_MS) -> None:
        if isinstance(log, str):
            log = EventLog(log)
        if not isinstance(log, (EventLog, KafkaSource)):
            raise TypeError(f"Topology needs an EventLog or a KafkaSource, got {type(log).__name__}")
        from .session import check_workers_import_project, register_sources

        register_sources(spark)
        check_workers_import_project(spark)
        start_callback_server(spark)
        if not isinstance(stores_per_query, int) or stores_per_query < 1:
            raise TopologyError(f"stores_per_query must be a positive integer, got {stores_per_query!r}")
        if max_records_per_batch is not None and (isinstance(max_records_per_batch, bool) or
                                                  not isinstance(max_records_per_batch, int) or
                                                  max_records_per_batch < 1):
            raise TopologyError(f"max_records_per_batch must be a positive integer or None (no cap), got "
                                f"{max_records_per_batch!r}")
        #: the default cap of a micro-batch for every stream (issue 22 item 3): a backlog is then read in
        #: bounded batches, and the driver's memory for one batch (collected as Arrow, sorted, staged) with it
        self.max_records_per_batch = max_records_per_batch
        if isinstance(cut_max_age_ms, bool) or not isinstance(cut_max_age_ms, int) or cut_max_age_ms < 0:
            raise TopologyError(f"cut_max_age_ms must be an integer >= 0, got {cut_max_age_ms!r}")
        #: where the runtime says which ledger the sources share (the state dir is not known yet): batch_cuts.py
        self.cut_ref: Path | None = new_ledger_ref() if shared_cuts else None
        self.cut_max_age_ms = cut_max_age_ms
        self.spark = spark
        self.log: SourceLog = log
        self.trigger = trigger
        self.stores_per_query = stores_per_query
        self.changelogs = changelogs  # every store's changes also go to its changelog topic (issue 17)
        self._streams: dict[str, tuple[str, ...]] = {}  # stream id -> topics
        self._frames: dict[tuple[Any, ...], DataFrame] = {}  # stream() arguments -> the one DataFrame for them
        self._decls: dict[str, StoreDecl] = {}
        self._stream_names = StreamNames()  # the streams SQL can read (stream_specs.py)

    # -- sources ------------------------------------------------------
    def stream(self, topic: str | Sequence[str], value_schema: str | StructType = "value STRING", *,
               key_type: str = "string", max_records_per_batch: int | None = None,
               starting_offsets: str = "earliest", include_headers: bool = False,
               name: str | None = None, key_column: str = "key") -> DataFrame:
        """A streaming DataFrame over ``topic`` (or several): key, value fields, timestamp, topic, partition, offset,
        tombstone.

        ``value_schema`` is the DDL of the JSON value's fields (``"amount
        DOUBLE, item STRING"``); missing or mistyped fields read as null, a
        tombstone (a null value) as all-null with ``tombstone`` true. ``key_type``
        may be ``array<…>`` or ``struct<…>`` (the key's JSON text, ksqlDB's ARRAY/STRUCT
        keys). ``max_records_per_batch`` caps a micro-batch
        (default: the topology's ``max_records_per_batch``, itself no cap unless given).
        ``include_headers`` adds ``headers`` ARRAY<STRUCT<key: STRING, value:
        BINARY>> (the record's headers in order, as Spark's Kafka source with
        ``includeHeaders=true``; the EventLog's records carry them too).
        The same arguments give the same DataFrame: stores built on it read
        the source once, in one shared query.

        SQL can read the stream's records (a pull query on a stream) under
        ``name``, by default the topic's name (``stream_specs.py`` says when a
        default name yields to a store's): the key (named ``key_column`` in
        SQL; the DataFrame's stays ``key``), the value fields, and the
        record's ``rowtime``, ``partition``, ``offset`` (and ``headers``).
        """
        topics = (topic,) if isinstance(topic, str) else tuple(topic)
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise TopologyError(f"stream: topic must be a name or a list of names, got {topic!r}")
        schema = parse_value_schema(value_schema)
        try:  # here, not as a traceback from inside Spark's data source
            stream_schema(schema, key_type, bool(include_headers))
        except ValueError as exc:
            raise TopologyError(f"stream {', '.join(topics)}: {exc}") from None
        ddl = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)
        if max_records_per_batch is None:
            max_records_per_batch = self.max_records_per_batch
        headers = bool(include_headers)
        self._stream_names.declare(topics, schema, key_type, headers,
                                   max((self._source_partitions(t) for t in topics), default=1), name, self._decls,
                                   key_column)
        key = (topics, ddl, key_type, max_records_per_batch, starting_offsets) + ((True,) if headers else ())
        if key not in self._frames:
            self._frames[key] = self._new_stream(topics, schema, ddl, key_type, max_records_per_batch,
                                                 starting_offsets, headers)
        return self._frames[key]

    def _new_stream(self, topics: tuple[str, ...], schema: StructType, ddl: str, key_type: str,
                    max_records_per_batch: int | None, starting_offsets: str, headers: bool = False) -> DataFrame:
        sid = str(next(_STREAM_IDS))
        self._streams[sid] = topics
        if isinstance(self.log, KafkaSource):
            return self._kafka_stream(topics, schema, key_type, max_records_per_batch, starting_offsets, sid,
                                      headers)
        reader = (self.spark.readStream.format("iqlog").option("path", str(self.log.root))
                  .option("topics", ",".join(topics)).option("valueSchema", ddl).option("keyType", key_type)
                  .option("startingOffsets", starting_offsets).option(_STREAM_OPT, sid))
        if headers:
            reader = reader.option("includeHeaders", "true")
        if max_records_per_batch is not None:
            reader = reader.option("maxRecordsPerBatch", str(int(max_records_per_batch)))
        return self._cut_options(reader).load()

    def _cut_options(self, reader: Any) -> Any:
        """Shared batch cuts (issue 47): the ledger's reference and the age limit, when sharing is on."""
        if self.cut_ref is None:
            return reader
        return reader.option(LEDGER_REF_OPTION, str(self.cut_ref)).option(MAX_AGE_OPTION, str(self.cut_max_age_ms))

    def _kafka_stream(self, topics: tuple[str, ...], schema: StructType, key_type: str,
                      max_records: int | None, starting: str, sid: str, headers: bool = False) -> DataFrame:
        """Kafka through Spark's own source when its jar is on the classpath, else through ``iqkafka``."""
        src = self.log
        assert isinstance(src, KafkaSource)
        if _native_kafka_available(self.spark):
            return self._native_kafka_stream(src, topics, schema, key_type, max_records, starting, sid, headers)
        ddl = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)
        reader = (self.spark.readStream.format("iqkafka").option("topics", ",".join(topics))
                  .option("valueSchema", ddl).option("keyType", key_type).option("startingOffsets", starting)
                  .option(_STREAM_OPT, sid))
        if headers:
            reader = reader.option("includeHeaders", "true")
        for k, v in source_options(src.bootstrap_servers, dict(src.options or {})).items():
            reader = reader.option(k, v)
        if max_records is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(int(max_records)))
        return self._cut_options(reader).load()

    def _native_kafka_stream(self, src: KafkaSource, topics: tuple[str, ...], schema: StructType, key_type: str,
                             max_records: int | None, starting: str, sid: str, headers: bool = False) -> DataFrame:
        reader = (self.spark.readStream.format("kafka").option("kafka.bootstrap.servers", src.bootstrap_servers)
                  .option("subscribe", ",".join(topics)).option("startingOffsets", starting)
                  .option("failOnDataLoss", "true").option(_STREAM_OPT, sid))
        if headers:
            reader = reader.option("includeHeaders", "true")
        for k, v in (src.options or {}).items():
            reader = reader.option(k if k.startswith("kafka.") else f"kafka.{k}", str(v))
        if max_records is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(int(max_records)))
        raw = reader.load()
        value = F.from_json(F.col("value").cast("string"), schema)
        kt = key_spark_type(key_type)
        if key_type.strip().lower() in ("binary", "bytes"):
            key_col = F.col("key")
        elif kt.typeName() in ("array", "struct"):  # JSON text, as Kafka's JSON key format carries them
            key_col = F.from_json(F.col("key").cast("string"), kt)
        else:
            key_col = F.col("key").cast("string").cast(key_type)
        return raw.select(key_col.alias("key"),
                          *[value[f.name].alias(f.name) for f in schema.fields],
                          "timestamp", "topic", "partition", "offset", F.col("value").isNull().alias(TOMBSTONE),
                          *(["headers"] if headers else []))

    # -- stores -------------------------------------------------------
    def table(self, name: str, df: DataFrame, *, key: str | Sequence[str], window: str | None = None,
              timestamp: str | None = None, partitions: int | None = None,
              output_mode: str | None = None, retention_ms: int | None = None,
              tombstones: str = "kafka") -> StoreSpec:
        """Materialize ``df`` as a key-value, window or session store (see the module docstring).

        ``key`` is a column, or a list of columns for a composite key (``groupBy("region", "product")``).
        ``tombstones`` (a table of records): ``"kafka"`` — only a record whose value is null deletes its key —
        or ``"all_null"`` — a record whose value columns are all null deletes it too.
        """
        self._check_new(name, df)
        plan = _plan_text(df)
        aggregated = _is_aggregate(plan)
        having = None
        tombstone_rule: str | None = None
        if aggregated:
            df, having = _split_having(name, df, plan)
            plan = _plan_text(df) if having is not None else plan
        cols = dict(df.dtypes)
        keys = key_names(name, key)
        for k in keys:
            _require_col(name, cols, k, "key")
        if window is not None:
            _require_col(name, cols, window, "window")
            if not cols[window].startswith("struct<start:timestamp,end:timestamp"):
                raise TopologyError(f"store {name!r}: window column {window!r} is {cols[window]}, not the "
                                    "struct<start,end> that F.window / F.session_window make")
        if timestamp is not None:
            _require_col(name, cols, timestamp, "timestamp")
            if cols[timestamp] not in ("timestamp", "timestamp_ntz", "bigint"):
                raise TopologyError(f"store {name!r}: timestamp column {timestamp!r} is {cols[timestamp]}, "
                                    "not a timestamp or epoch-ms bigint")
        if aggregated:
            session = window is not None and "session_window" in plan
            shape = "session" if session else ("window" if window is not None else "aggregate")
            default_mode = "append" if session else "update"
            allowed = {"session": ("append",), "window": ("update", "append"), "aggregate": ("update",)}[shape]
        else:
            if window is not None:
                raise TopologyError(f"store {name!r}: a window column needs a windowed aggregation "
                                    "(df.groupBy(F.window(...), key).agg(...))")
            shape, default_mode, allowed = "latest", "append", ("append",)
            if timestamp is None and cols.get("timestamp") == "timestamp":
                timestamp = "timestamp"
            tombstone_rule = check_tombstones(name, df, tombstones)
        mode = _check_mode(name, shape, output_mode or default_mode, allowed)
        skip = {*keys, window, timestamp} | ({*METADATA_COLUMNS, HEADERS} if shape == "latest" else set())
        value_cols = tuple(c for c in df.columns if c not in skip)
        kind = {"aggregate": StoreKind.TIMESTAMPED_KEY_VALUE, "latest": StoreKind.TIMESTAMPED_KEY_VALUE,
                "window": StoreKind.WINDOW, "session": StoreKind.SESSION}[shape]
        if shape == "latest" and timestamp is None:
            kind = StoreKind.KEY_VALUE
        size, advance, gap = _window_params(plan) if window is not None else (None, None, None)
        spec = self._spec(name, df, plan, kind, keys, value_cols, partitions,
                          window_size_ms=size if shape == "window" else None,
                          window_advance_ms=advance if shape == "window" else None,
                          gap_ms=gap if shape == "session" else None,
                          history_retention_ms=None, options={"retention_ms": retention_ms} if retention_ms else {})
        return self._add(StoreDecl(spec, df, shape, mode, keys[0], value_cols, window, timestamp, key_cols=keys,
                                   having=having, tombstones=tombstone_rule))

    def versioned_table(self, name: str, df: DataFrame, *, key: str | Sequence[str], timestamp: str = "timestamp",
                        partitions: int | None = None, history_retention_ms: int | None = None,
                        tombstones: str = "kafka") -> StoreSpec:
        """Keep every version of each key by event time (``timestamp``); a tombstone (a record whose value is null)
        is a version that deletes (``tombstones="all_null"``: a record whose values are all null too)."""
        self._check_new(name, df)
        plan = _plan_text(df)
        if _is_aggregate(plan):
            raise TopologyError(f"store {name!r}: a versioned table takes the records themselves, "
                                "not an aggregation; use table() for aggregates")
        tombstone_rule = check_tombstones(name, df, tombstones)
        cols = dict(df.dtypes)
        keys = key_names(name, key)
        for k in keys:
            _require_col(name, cols, k, "key")
        _require_col(name, cols, timestamp, "timestamp")
        if cols[timestamp] not in ("timestamp", "timestamp_ntz", "bigint"):
            raise TopologyError(f"store {name!r}: timestamp column {timestamp!r} is {cols[timestamp]}, "
                                "not a timestamp or epoch-ms bigint")
        skip = {*keys, timestamp} | {*METADATA_COLUMNS, HEADERS}  # record metadata: derive a column to keep one
        value_cols = tuple(c for c in df.columns if c not in skip)
        spec = self._spec(name, df, plan, StoreKind.VERSIONED, keys, value_cols, partitions,
                          history_retention_ms=history_retention_ms)
        return self._add(StoreDecl(spec, df, "versioned", "append", keys[0], value_cols, None, timestamp,
                                   key_cols=keys, tombstones=tombstone_rule))

    def table_aggregate(self, name: str, df: DataFrame, *, key: str = "key", group_by: str | Sequence[str],
                        count: str = "count", sums: dict[str, str] | None = None, mins: dict[str, str] | None = None,
                        maxs: dict[str, str] | None = None, avgs: dict[str, str] | None = None,
                        collect_lists: dict[str, str] | None = None, collect_sets: dict[str, str] | None = None,
                        topks: dict[str, tuple[str, int]] | None = None,
                        topk_distincts: dict[str, tuple[str, int]] | None = None,
                        where: Any = None, having: Any = None, partitions: int | None = None) -> StoreSpec:
        """Aggregates per ``group_by`` value(s) over the TABLE ``df`` is the changelog of (issues 16 and 51), with
        retraction, ``where`` and ``having``. See ``stateful_tables.table_aggregate_decl``.
        """
        self._check_new(name, df)
        return self._add(table_aggregate_decl(name, df, key=key, group_by=group_by, count=count, sums=sums,
                                              mins=mins, maxs=maxs, avgs=avgs, collect_lists=collect_lists,
                                              collect_sets=collect_sets, topks=topks, topk_distincts=topk_distincts,
                                              where=where, having=having, topics=self._topics_of(df),
                                              partitions=self._partitions(df, partitions)))

    def join_table(self, name: str, left: DataFrame, right: DataFrame | Sequence[DataFrame], *,
                   on: str | None | Sequence[str | None] = None, how: str | Sequence[str] = "inner",
                   key: str = "key", right_key: str | Sequence[str] = "key", columns: Any = None, where: Any = None,
                   tombstones: str | Sequence[str] = "kafka", partitions: int | None = None) -> StoreSpec:
        """A table-table join maintained by Spark (issue 51): ksqlDB's ``CREATE TABLE … AS SELECT … FROM a JOIN b``.

        ``left`` and ``right`` are streams read as tables (latest record per key, tombstones delete). ``on=None``
        joins on the key (``how`` inner, left, right or full); ``on="fk"`` names a left value column holding the
        right key, a foreign-key join (KIP-213, inner or left), keyed by the left key. ``right`` may be a list to
        chain joins (``on``/``how``/``right_key`` then lists too; a foreign key may be any earlier input's
        column). ``columns`` picks (a list) or renames (a mapping output → input column) the value columns;
        ``where`` is a Spark SQL condition on the result's columns (a row failing it is not in the store).
        See ``joins.py`` and ``join_state.py``.
        """
        self._check_new(name, left)
        rights = list(right) if isinstance(right, (list, tuple)) else [right]
        if not rights:
            raise TopologyError(f"store {name!r}: join_table needs at least one right input")
        from .joins import _listed, join_decl

        n = len(rights)
        decl = join_decl(name, [left, *rights], keys=[key, *_listed(right_key, n, "right_key", name)],
                         on=_listed(on, n, "on", name), how=_listed(how, n, "how", name), as_of=False,
                         columns=columns, where=where, tombstones=_listed(tombstones, n + 1, "tombstones", name),
                         topics=self._topics_of_all([left, *rights]),
                         partitions=self._partitions(left, partitions))
        return self._add(decl)

    def stream_table_join(self, name: str, stream: DataFrame, table: DataFrame, *, on: str | None = None,
                          how: str = "inner", key: str = "key", table_key: str = "key", columns: Any = None,
                          where: Any = None, tombstones: str | Sequence[str] = "kafka",
                          partitions: int | None = None) -> StoreSpec:
        """Each stream record enriched with the table's row as of the record's timestamp (issue 51): ksqlDB's
        stream-table join, kept as a table of the stream's latest record per key (``on``: the stream column holding
        the table key, None for the stream's key; ``how`` inner or left). Table records that arrive late (an
        older timestamp) correct the rows they apply to. See ``join_state.py``.
        """
        self._check_new(name, stream)
        from .joins import _listed, join_decl

        decl = join_decl(name, [stream, table], keys=[key, table_key], on=[on], how=[how], as_of=True,
                         columns=columns, where=where, tombstones=_listed(tombstones, 2, "tombstones", name),
                         topics=self._topics_of_all([stream, table]), partitions=self._partitions(stream, partitions))
        return self._add(decl)

    def session_table(self, name: str, df: DataFrame, *, key: str = "key", gap: str | int,
                      timestamp: str = "timestamp", count: str = "count", sums: dict[str, str] | None = None,
                      mins: dict[str, str] | None = None, maxs: dict[str, str] | None = None,
                      avgs: dict[str, str] | None = None, retention_ms: int | None = None,
                      partitions: int | None = None) -> StoreSpec:
        """Session windows visible while open (issue 16 item 4); see ``stateful_tables.session_table_decl``."""
        self._check_new(name, df)
        return self._add(session_table_decl(name, df, key=key, gap=gap, timestamp=timestamp, count=count, sums=sums,
                                            mins=mins, maxs=maxs, avgs=avgs, retention_ms=retention_ms,
                                            topics=self._topics_of(df), partitions=self._partitions(df, partitions)))

    def _partitions(self, df: DataFrame, partitions: int | None) -> int:
        if partitions is not None:
            return partitions
        return max((self._source_partitions(t) for t in self._topics_of(df)), default=1)

    # -- TopologyLike ---------------------------------------------------
    def store_specs(self) -> list[StoreSpec]:
        return [d.spec for d in self._decls.values()]

    def stream_specs(self) -> list[StreamSpec]:
        """The streams SQL can read (published by the app beside the stores' specs)."""
        return self._stream_names.specs()

    def declarations(self) -> list[StoreDecl]:
        return list(self._decls.values())

    def store_definitions(self) -> dict[str, dict[str, Any]]:
        """Each store's definition with its fingerprint (issue 20): the app compares them with those on disk."""
        from .definitions import definition_of

        return {n: definition_of(d, _plan_text(d.df)) for n, d in self._decls.items()}

    def create_runtime(self, app: Any) -> Any:
        from .runtime import SparkRuntime

        return SparkRuntime(self, app)

    # -- helpers --------------------------------------------------------
    def _check_new(self, name: str, df: Any) -> None:
        if not isinstance(name, str) or not name:
            raise TopologyError(f"store name must be a non-empty string, got {name!r}")
        if name in self._decls:
            raise TopologyError(f"store name {name!r} is used twice in this topology")
        self._stream_names.check_store(name)
        if not isinstance(df, DataFrame):
            raise TopologyError(f"store {name!r}: expected a pyspark DataFrame, got {type(df).__name__}")
        if not df.isStreaming:
            raise TopologyError(f"store {name!r}: the DataFrame is not streaming; build it from Topology.stream()")

    def _add(self, decl: StoreDecl) -> StoreSpec:
        decl = dataclasses.replace(decl, streams=frozenset(_stream_ids(decl.df)))
        self._decls[decl.spec.name] = decl
        return decl.spec

    def _spec(self, name: str, df: DataFrame, plan: str, kind: StoreKind, keys: tuple[str, ...],
              value_cols: tuple[str, ...], partitions: int | None, **extra: Any) -> StoreSpec:
        fields = {f.name: f.dataType for f in df.schema.fields}
        topics = self._topics_of(df)
        if partitions is None:
            partitions = max((self._source_partitions(t) for t in topics), default=1)
        try:
            key = tuple(_column(name, k, fields[k]) for k in keys)
            return StoreSpec(name=name, kind=kind, key=key if len(key) > 1 else key[0],
                             values=tuple(_column(name, c, fields[c]) for c in value_cols),
                             partitions=partitions, source_topics=topics, **extra)
        except ValueError as exc:
            raise TopologyError(str(exc)) from None

    def _topics_of_all(self, dfs: Sequence[DataFrame]) -> tuple[str, ...]:
        return tuple(sorted({t for df in dfs for t in self._topics_of(df)}))

    def _topics_of(self, df: DataFrame) -> tuple[str, ...]:
        ids = _stream_ids(df)
        topics = {t for i in ids for t in self._streams.get(i, ())}
        if not topics:  # a DataFrame this topology did not make: assume every stream
            topics = {t for ts in self._streams.values() for t in ts}
        return tuple(sorted(topics))

    def _source_partitions(self, topic: str) -> int:
        """How many partitions the stream's topic has (a count pinned on the source is asked of no broker)."""
        pinned = (getattr(self.log, "partitions_override", None) or {}).get(topic)
        if pinned is not None:
            return int(pinned)
        return self.log.partitions(topic) if self.log.has_topic(topic) else 1


def _stream_ids(df: DataFrame) -> set[str]:
    """The ``iqgate.stream`` option of every streaming source leaf in the plan (which topics feed a store)."""
    ids = set()
    leaves = df._jdf.queryExecution().analyzed().collectLeaves().iterator()
    while leaves.hasNext():
        leaf = leaves.next()
        try:
            sid = leaf.extraOptions().get(_STREAM_OPT)
        except Exception:  # noqa: BLE001 - a leaf without options (a batch relation)
            continue
        if sid is not None:
            ids.add(str(sid))
    return ids


def start_callback_server(spark: SparkSession) -> None:
    """Start py4j's callback server (foreachBatch calls back through it) now, while file descriptors are few.

    Why: py4j's callback server accepts with ``select()``, which cannot watch a
    descriptor above 1023; started lazily by the first foreachBatch after many
    store files are open, its socket lands above that and the first batch hangs.
    """
    from pyspark.java_gateway import ensure_callback_server_started

    gw = getattr(spark.sparkContext, "_gateway", None)
    if gw is not None:
        ensure_callback_server_started(gw)


def _native_kafka_available(spark: SparkSession) -> bool:
    """Whether Spark's own Kafka source (the spark-sql-kafka jar) is on the classpath: then it reads Kafka."""
    try:
        spark.sparkContext._jvm.java.lang.Class.forName(  # type: ignore[union-attr]
            "org.apache.spark.sql.kafka010.KafkaSourceProvider")
        return True
    except Exception:  # noqa: BLE001 - ClassNotFoundException through py4j
        return False


def _check_mode(store: str, shape: str, mode: str, allowed: tuple[str, ...]) -> str:
    if mode not in allowed:
        what = {"aggregate": "an aggregation by key", "window": "a window aggregation",
                "session": "a session-window aggregation", "latest": "a table of records"}[shape]
        raise TopologyError(f"store {store!r}: output mode {mode!r} is not supported for {what}; "
                            f"use {' or '.join(allowed)}")
    return mode


def _window_params(plan: str) -> tuple[int | None, int | None, int | None]:
    """(size, advance, gap) in ms read from the analyzed plan (best effort: None if not found)."""
    size = re.search(r"\) \+ (\d+)\), LongType, TimestampType\)", plan)
    slide = re.search(r"% (\d+)\) < cast\(0 as bigint\)", plan)
    gap = re.search(r"cast\((\d+) (millisecond|second|minute|hour|day)s? as interval\)", plan)
    return (int(size.group(1)) // 1000 if size else None,
            int(slide.group(1)) // 1000 if slide else None,
            int(gap.group(1)) * _UNITS_MS[gap.group(2)] if gap else None)
