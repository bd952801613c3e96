"""PostgreSQL's json_extract_path(_text) with several keys (planner/dialect.py ``_json_call``).

sqlglot's DuckDB builder kept the first key and dropped the rest, so
``json_extract_path_text(j, 'a', 'b')`` answered j's ``a`` (s17). BI tools
written for PostgreSQL call it with several keys.
"""

from __future__ import annotations

import pytest

from gateway import Gateway
from gateway.engine.errors import SqlError

J = """'{"a": {"b": 1, "c": [5, 6]}, "l": [10, {"k": "x"}], "s": "t"}'"""


@pytest.mark.parametrize("sql, want", [
    (f"SELECT json_extract_path_text({J}, 'a', 'b')", "1"),
    (f"SELECT json_extract_path_text({J}, 'l', '1', 'k')", "x"),  # a number into an array is its index
    (f"SELECT json_extract_path_text({J}, 'a', 'c', '0')", "5"),
    (f"SELECT json_extract_path_text({J}, 'a', 'nope')", None),
    ("SELECT json_extract_path_text(NULL, 'a', 'b')", None),
    (f"SELECT json_extract_path({J}, 'a', 'c')::VARCHAR", "[5,6]"),
    (f"SELECT json_extract_path_text({J}, k1, k2) FROM (VALUES ('a', 'b')) t(k1, k2)", "1"),
    (f"SELECT json_extract_path({J}, k1, k2, k3)::VARCHAR FROM (VALUES ('l', 1, 'k')) t(k1, k2, k3)", '"x"'),
    (f"SELECT json_extract_path_text({J}, 's')", "t"),  # one key: DuckDB's two-argument function, as before
    (f"SELECT json_extract_path_text({J}, '$.a.b')", "1"),
], ids=["two-keys", "through-an-array", "into-a-list", "missing", "null", "json", "columns-text", "columns-json",
        "one-key", "duckdb-path"])
def test_json_extract_path_follows_every_key(gw: Gateway, sql: str, want: object) -> None:
    assert gw.sql(sql).rows() == [(want,)]


@pytest.mark.parametrize("function", ["json_extract_string", "json_extract", "json_extract_scalar"])
def test_other_json_functions_with_three_arguments_are_refused_not_cut_short(gw: Gateway, function: str) -> None:
    """DuckDB's json_extract(_string) take two arguments (refused by count), and json_extract_scalar is not
    DuckDB's (refused by DuckDB): never the first path's value."""
    with pytest.raises(SqlError, match=rf"\b{function}\b") as err:
        gw.sql(f"SELECT {function}({J}, 'a', 'b')")
    assert "takes at most 2 arguments, got 3" in str(err.value) or "does not exist" in str(err.value)
