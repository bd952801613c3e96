"""Declaring a materialized join (issue 51): the inputs checked, one streaming query over all of them.

``Topology.join_table`` (table-table joins, on the key or on a foreign key,
chained over several tables) and ``Topology.stream_table_join`` build a
``StoreDecl`` whose DataFrame is the union of every input's records, each as
a struct ``__s<i>`` (key, time, log position, tombstone flag, value columns;
timestamps as epoch ms) tagged by ``__side``: a stateless query, so its
Position covers every input topic. foreachBatch keeps the inputs' tables
and computes the result (``join_state.py``, which says why it is done there).

Inputs are streams read as tables: each key's latest record is its row, a
tombstone (``tombstones="kafka"``: a record whose value is null) deletes it.
The result's columns are every input's value columns in input order (a name
on two inputs is refused: rename one with ``withColumnRenamed``, which keeps
the record metadata), or those ``columns`` picks and renames.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from ..catalog.schema import Column, SqlType, StoreKind, StoreSpec
from .conditions import compile_condition
from .declarations import StoreDecl, TopologyError, _column, _is_aggregate, _plan_text, check_tombstones
from .join_state import JoinSide, JoinStatePlan, JoinStep
from .stream_rows import HEADERS, METADATA_COLUMNS, TOMBSTONE

__all__ = ["join_decl", "HOWS"]

HOWS = ("inner", "left", "right", "full")
_INTS = (SqlType.BIGINT, SqlType.INTEGER)


def _listed(value: Any, n: int, what: str, store: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise TopologyError(f"store {store!r}: {what} lists {len(value)} item(s) for {n} joined input(s)")
        return list(value)
    return [value] * n


def _ms(col: Any, spark_type_name: str) -> Any:
    if spark_type_name.startswith("timestamp"):
        return F.when(col.isNull(), F.lit(None)).otherwise(F.unix_millis(col.cast("timestamp")))
    return col


def _compatible(a: Any, b: Any) -> bool:
    return a == b or (a in _INTS and b in _INTS)


class _Input:
    """One input: its DataFrame, key column, value columns (name, Spark type name, catalog type), rule."""

    def __init__(self, store: str, df: Any, key: Any, tombstones: str, role: str) -> None:
        if not isinstance(df, DataFrame) or not df.isStreaming:
            raise TopologyError(f"store {store!r}: the {role} input must be a streaming DataFrame from "
                                f"Topology.stream(), got {type(df).__name__}")
        if _is_aggregate(_plan_text(df)):
            raise TopologyError(f"store {store!r}: the {role} input is an aggregation; a join reads tables of records "
                                "(aggregate the join's inputs in a store of their own, or join first)")
        cols = dict(df.dtypes)
        if not isinstance(key, str) or key not in cols:
            raise TopologyError(f"store {store!r}: the {role} input has no key column {key!r}; its columns are "
                                f"{list(cols)}")
        self.df, self.key, self.cols = df, key, cols
        self.rule = check_tombstones(store, df, tombstones)
        fields = {f.name: f.dataType for f in df.schema.fields}
        skip = {key, *METADATA_COLUMNS, HEADERS}
        self.values = [c for c in df.columns if c not in skip]
        self.key_type = _column(store, key, fields[key]).type
        self.types = [_column(store, c, fields[c]).type for c in self.values]
        self.spark_types = {c: fields[c] for c in df.columns}

    def struct(self) -> Any:
        """The input's records as the struct the driver side reads (see ``join_state._flat``)."""
        c = self.cols

        def col(name: str, typ: str) -> Any:
            return F.col(f"`{name}`") if name in c else F.lit(None).cast(typ)
        if self.rule == "kafka":
            tomb = F.col(TOMBSTONE)
        else:
            tomb = F.lit(True)
            for v in self.values:
                tomb = tomb & F.col(f"`{v}`").isNull()
        fields = [_ms(F.col(f"`{self.key}`"), c[self.key]).alias("k"),
                  _ms(col("timestamp", "timestamp"), c.get("timestamp", "timestamp")).cast("bigint").alias("ts"),
                  col("topic", "string").alias("t"), col("partition", "int").alias("p"),
                  col("offset", "bigint").alias("o"), tomb.alias("tomb"),
                  *(_ms(F.col(f"`{v}`"), c[v]).alias(f"v{j}") for j, v in enumerate(self.values))]
        return self.df.select(F.struct(*fields).alias("s"))


def join_decl(name: str, inputs: Sequence[DataFrame], *, keys: Sequence[str], on: Sequence[str | None],
              how: Sequence[str], as_of: bool, columns: Any, where: Any, tombstones: Sequence[str],
              topics: tuple[str, ...], partitions: int) -> StoreDecl:
    """The declaration of a join store over ``inputs`` (see the module docstring and ``join_state.py``)."""
    roles = ["left", *("right" if len(inputs) == 2 else f"input {i}" for i in range(1, len(inputs)))]
    if as_of:
        roles = ["stream", "table"]
    sides = [_Input(name, df, k, r, role) for df, k, r, role in zip(inputs, keys, tombstones, roles)]
    owner: dict[str, tuple[int, int]] = {}
    for i, s in enumerate(sides):
        for j, v in enumerate(s.values):
            if v in owner or v == sides[0].key:
                raise TopologyError(f"store {name!r}: column {v!r} is on two joined inputs (or is the key); rename "
                                    "one first (df.withColumnRenamed, which keeps the record metadata)")
            owner[v] = (i, j)
    steps = []
    for i, (o, h) in enumerate(zip(on, how), start=1):
        if h not in HOWS:
            raise TopologyError(f"store {name!r}: how must be one of {', '.join(HOWS)}, got {h!r}")
        if as_of and h not in ("inner", "left"):
            raise TopologyError(f"store {name!r}: a stream-table join is inner or left, got {h!r}")
        if o is None or o == sides[0].key:
            if not _compatible(sides[i].key_type, sides[0].key_type):
                raise TopologyError(f"store {name!r}: a join on the key needs keys of one type; the {roles[0]} key is "
                                    f"{sides[0].key_type} and the {roles[i]} key {sides[i].key_type}")
            steps.append(JoinStep(h))
            continue
        if not isinstance(o, str) or o not in owner or owner[o][0] >= i:
            raise TopologyError(f"store {name!r}: on={o!r} must name a value column of an earlier input (a foreign "
                                f"key holding the {roles[i]} key), or be None to join on the key; the columns are "
                                f"{list(owner)}")
        if h not in ("inner", "left"):
            raise TopologyError(f"store {name!r}: a foreign-key join is inner or left (KIP-213), got {h!r}")
        j, c = owner[o]
        if not _compatible(sides[j].types[c], sides[i].key_type):
            raise TopologyError(f"store {name!r}: foreign key {o!r} is {sides[j].types[c]} but the {roles[i]} key is "
                                f"{sides[i].key_type}; cast one of them")
        steps.append(JoinStep(h, (j, c)))
    if any(s.on is not None for s in steps) and any(s.how in ("right", "full") for s in steps):
        raise TopologyError(f"store {name!r}: right and full joins are joins on the key; with a foreign-key step "
                            "the result is keyed by the first input's key, so use inner or left")
    output = _output(name, columns, owner, sides)
    timestamped = all("timestamp" in s.cols for s in (sides[:1] if as_of else sides))
    key = Column(sides[0].key, sides[0].key_type)
    values = tuple(Column(out, sides[i].types[j]) for out, i, j in output)
    try:
        spec = StoreSpec(name=name, kind=StoreKind.TIMESTAMPED_KEY_VALUE if timestamped else StoreKind.KEY_VALUE,
                         key=key, values=values, partitions=partitions, source_topics=topics)
    except ValueError as exc:
        raise TopologyError(str(exc)) from None
    cond = None
    if where is not None:  # over the key and every input's value columns, as ksqlDB's WHERE on a join
        fields = {key.name: (sides[0].spark_types[sides[0].key], key.type)}
        fields.update({v: (sides[i].spark_types[v], sides[i].types[j]) for v, (i, j) in owner.items()})
        cond = compile_condition(sides[0].df.sparkSession, name, "where", where, fields)
    plan = JoinStatePlan(name, tuple(JoinSide(s.key_type, tuple(s.values), tuple(s.types)) for s in sides),
                         tuple(steps), tuple(output), key.name, timestamped, as_of, cond,
                         tuple((v, i, j) for v, (i, j) in owner.items()))
    extra = (("join", {"as_of": as_of, "steps": [[s.how, None if s.on is None else list(s.on)] for s in steps],
                       "inputs": [[s.key, list(s.values), s.rule] for s in sides],
                       "output": [list(o) for o in output], "where": None if cond is None else cond.text}),)
    return StoreDecl(spec, _union([s.struct() for s in sides]), "join", "append", key.name, spec.value_names(),
                     None, None, key_cols=(key.name,), driver_plan=plan, definition_extra=extra)


def _output(name: str, columns: Any, owner: dict[str, tuple[int, int]], sides: list[_Input]
            ) -> list[tuple[str, int, int]]:
    """``columns``: None (every value column), a list of names, or a mapping output name → input column."""
    if columns is None:
        return [(v, i, j) for i, s in enumerate(sides) for j, v in enumerate(s.values)]
    pairs = list(columns.items()) if isinstance(columns, dict) else [(c, c) for c in columns] \
        if isinstance(columns, (list, tuple)) else None
    if not pairs or not all(isinstance(a, str) and isinstance(b, str) for a, b in pairs):
        raise TopologyError(f"store {name!r}: columns must be a list of value column names or a mapping of output "
                            f"names to them, got {columns!r}")
    out = []
    for alias, col in pairs:
        if col not in owner:
            raise TopologyError(f"store {name!r}: columns: {col!r} is not a value column of the joined inputs; they "
                                f"are {list(owner)} (the key is always the result's key)")
        out.append((alias, *owner[col]))
    return out


def _union(projs: list[DataFrame]) -> DataFrame:
    """Every input's records in one DataFrame: ``__side`` and one nullable struct per input (as shared queries)."""
    types = [StructType([StructField(f.name, f.dataType, True) for f in p.schema["s"].dataType.fields])
             for p in projs]
    projs = [p.select(F.col("s").cast(t).alias("s")) for p, t in zip(projs, types)]
    frames = [p.select(F.lit(i).alias("__side"), *[
        (F.col("s") if j == i else F.lit(None).cast(types[j])).alias(f"__s{j}") for j in range(len(projs))])
        for i, p in enumerate(projs)]
    return reduce(DataFrame.union, frames)

