"""The catalog every planner test plans against: one store per kind, and one per key type."""

from __future__ import annotations

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec


def _kv(name: str, key_type: SqlType, partitions: int = 4) -> StoreSpec:
    return StoreSpec(name, StoreKind.KEY_VALUE, Column("k", key_type), (Column("v", SqlType.VARCHAR), Column("n", SqlType.BIGINT)),
                     partitions=partitions, source_topics=("events",))


CATALOG: dict[str, StoreSpec] = {
    "mystore": _kv("mystore", SqlType.BIGINT),
    "int_store": _kv("int_store", SqlType.INTEGER),
    "str_store": _kv("str_store", SqlType.VARCHAR),
    "dbl_store": _kv("dbl_store", SqlType.DOUBLE),
    "bool_store": _kv("bool_store", SqlType.BOOLEAN, partitions=2),
    "ts_store": _kv("ts_store", SqlType.TIMESTAMP),
    "date_store": _kv("date_store", SqlType.DATE),
    "revenue": StoreSpec("revenue", StoreKind.TIMESTAMPED_KEY_VALUE, Column("customer", SqlType.VARCHAR),
                         (Column("total", SqlType.DOUBLE),), partitions=3, source_topics=("orders",)),
    "per_min": StoreSpec("per_min", StoreKind.WINDOW, Column("key", SqlType.VARCHAR), (Column("cnt", SqlType.BIGINT),),
                         partitions=2, source_topics=("orders",), window_size_ms=60_000),
    "hopping": StoreSpec("hopping", StoreKind.WINDOW, Column("key", SqlType.VARCHAR), (Column("cnt", SqlType.BIGINT),),
                         partitions=2, window_size_ms=None),
    "sessions": StoreSpec("sessions", StoreKind.SESSION, Column("user", SqlType.VARCHAR), (Column("clicks", SqlType.BIGINT),),
                          partitions=2, gap_ms=30_000),
    "last_order": StoreSpec("last_order", StoreKind.VERSIONED, Column("key", SqlType.VARCHAR), (Column("amount", SqlType.DOUBLE),),
                            partitions=2, history_retention_ms=86_400_000),
    "single": StoreSpec("single", StoreKind.KEY_VALUE, Column("id", SqlType.BIGINT), (Column("name", SqlType.VARCHAR),), partitions=1),
}
