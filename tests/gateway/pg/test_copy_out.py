"""``COPY (query) TO STDOUT`` through real clients: psycopg's copy parser (text and binary), psql's ``\\copy`` to a
CSV file, asyncpg's ``copy_from_query``; each compared with the same SELECT's rows, never with typed-in text
(except the CSV quoting rules, which a parser cannot tell apart: a quoted empty string against NULL)."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import asyncpg
import psycopg
import pytest
from psycopg import errors as pe

from gateway.engine.errors import GatewayError
from gateway.pg.copy_out import parse_copy
from tests.gateway.gwfixtures import Http, Shop
from tests.gateway.pg.conftest import Pg, asyncpg_run

PSQL = shutil.which("psql")
ACCOUNTS = "SELECT id, name, balance, active, opened FROM accounts ORDER BY id"
AWKWARD = ("SELECT * FROM (VALUES (1, E'tab\\there', 'new\nline', NULL), (2, 'back\\slash', 'q\"uote,comma', ''), "
           "(3, E'\\\\.', 'cr\rhere', 'plain')) t(i, a, b, c) ORDER BY i")
TYPES = ["int8", "text", "float8", "bool", "timestamptz"]


@pytest.mark.parametrize("fmt", ["", " (FORMAT binary)", " WITH (FORMAT text, DELIMITER '|', NULL 'nil')"],
                         ids=["text", "binary", "text-options"])
def test_copy_rows_read_back_by_psycopg_are_the_selects(pg: Pg, fmt: str) -> None:
    with pg.connect(autocommit=True) as con:
        cur = con.cursor()
        want = cur.execute(ACCOUNTS).fetchall()
        if "DELIMITER" in fmt:  # psycopg's parser reads only the default text format: check the options by hand
            with cur.copy(f"COPY ({ACCOUNTS}) TO STDOUT{fmt}") as cp:
                lines = b"".join(bytes(b) for b in cp).decode().splitlines()
            assert [line.split("|")[0] for line in lines] == [str(r[0]) for r in want]
            assert [line.split("|")[1] == "nil" for line in lines] == [r[1] is None for r in want]
            return
        with cur.copy(f"COPY ({ACCOUNTS}) TO STDOUT{fmt}") as cp:
            cp.set_types(TYPES)
            got = list(cp.rows())
        assert cur.rowcount == len(want)
    assert got == want and len(want) > 20


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_awkward_values_round_trip(pg: Pg, binary: bool) -> None:
    with pg.connect(autocommit=True) as con:
        cur = con.cursor()
        want = cur.execute(AWKWARD).fetchall()
        with cur.copy(f"COPY ({AWKWARD}) TO STDOUT" + (" (FORMAT binary)" if binary else "")) as cp:
            cp.set_types(["int4", "text", "text", "text"])
            got = list(cp.rows())
    assert got == want and want[0][3] is None and want[1][3] == ""


def _copied(con: psycopg.Connection, sql: str) -> str:
    with con.cursor().copy(sql) as cp:
        return b"".join(bytes(b) for b in cp).decode()


def test_csv_quoting_follows_postgresql(pg: Pg) -> None:
    with pg.connect(autocommit=True) as con:
        raw = _copied(con, f"COPY ({AWKWARD}) TO STDOUT (FORMAT csv, HEADER)")
        forced = _copied(con, "COPY (SELECT 1 AS a, 'x' AS b, NULL AS c) TO STDOUT WITH CSV FORCE QUOTE *")
        chosen = _copied(con, "COPY (SELECT 1 AS a, 'x' AS b) TO STDOUT (FORMAT csv, FORCE_QUOTE (b), "
                              "QUOTE '''', DELIMITER ';')")
        escaped = _copied(con, "COPY (SELECT 1 AS a, 2 AS b) TO STDOUT WITH CSV DELIMITER AS E'\\t' NULL AS 'n'")
        marker = _copied(con, "COPY (SELECT E'\\\\.' AS a) TO STDOUT (FORMAT csv)")
    assert forced == '"1","x",\n' and chosen == "1;'x'\n"  # NULL is never quoted
    assert escaped == "1\t2\n"  # an E'' option value has its escapes read
    rows = list(csv.reader(io.StringIO(raw, newline="")))
    assert rows[0] == ["i", "a", "b", "c"]
    assert [r[1:3] for r in rows[1:]] == [["tab\there", "new\nline"], ["back\\slash", 'q"uote,comma'],
                                          ["\\.", "cr\rhere"]]
    # NULL is an empty field, an empty string a quoted one; \. is quoted only alone on its line, where it would
    # end the data of a COPY FROM
    assert raw.splitlines()[2].endswith(",") and ',""\n' in raw and "\n3,\\.," in raw and marker == '"\\."\n'


def test_copy_of_a_store_and_a_big_result_stream(pg: Pg, shop: Shop) -> None:
    with pg.connect(autocommit=True) as con:
        cur = con.cursor()
        with cur.copy("COPY accounts (id, name) TO STDOUT") as cp:
            cp.set_types(["int8", "text"])
            store = sorted(cp.rows())
        with cur.copy("COPY (SELECT range AS n, 'row ' || range AS label FROM range(200000)) TO STDOUT") as cp:
            lines = b"".join(bytes(b) for b in cp).count(b"\n")
        assert cur.rowcount == 200_000
    assert store == sorted((i, row[0]) for i, row in shop.accounts.items())
    assert lines == 200_000


@pytest.mark.skipif(PSQL is None and not os.environ.get("IQGATE_CI"),
                    reason="psql missing (apt-get install postgresql-client; .ci/run installs it)")
def test_psql_backslash_copy_writes_the_csv_file(pg: Pg, server: Http, tmp_path: Path) -> None:
    assert PSQL is not None
    target = tmp_path / "revenue.csv"
    sql = "SELECT customer, orders FROM revenue ORDER BY customer"
    proc = subprocess.run([PSQL, "-X", "-v", "ON_ERROR_STOP=1", "-c",
                           f"\\copy ({sql}) TO '{target}' WITH (FORMAT csv, HEADER)"],
                          env={**os.environ, **pg.libpq_env()}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    status, _, body = server.sql(sql)
    assert status == 200
    with target.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["customer", "orders"]
    assert rows[1:] == [[c, str(n)] for c, n in body["rows"]]
    assert proc.stdout.strip() == f"COPY {len(body['rows'])}"


def test_asyncpg_copy_from_query_and_table(pg: Pg, shop: Shop) -> None:
    ids = sorted(shop.accounts)

    async def body(con: asyncpg.Connection) -> tuple[str, bytes, str]:
        out = io.BytesIO()  # with an argument: asyncpg inlines it with quote_literal($1::pg_catalog.int8::text)
        tag = await con.copy_from_query("SELECT id FROM accounts WHERE id < $1 ORDER BY id", ids[5], output=out,
                                        format="csv", header=True)
        table = io.BytesIO()
        tag2 = await con.copy_from_table("accounts", columns=["id"], output=table)
        return tag, out.getvalue(), tag2 + " " + str(sorted(int(x) for x in table.getvalue().split()))

    tag, data, table = asyncpg_run(pg, body)
    assert tag == "COPY 5" and data.decode().split() == ["id"] + [str(i) for i in ids[:5]]
    assert table == f"COPY {len(ids)} {ids}"


@pytest.mark.parametrize(("sql", "error", "words"), [
    ("COPY accounts FROM STDIN", pe.ReadOnlySqlTransaction, "read-only"),
    ("COPY (SELECT 1) TO '/tmp/x.csv'", pe.FeatureNotSupported, "use COPY … TO STDOUT"),
    ("COPY (SELECT 1) TO PROGRAM 'cat'", pe.FeatureNotSupported, "program"),
    ("COPY (SELECT 1) TO STDOUT (FORMAT xml)", pe.SyntaxError, "format 'xml' not recognized"),
    ("COPY (SELECT 1) TO STDOUT (FORMAT binary, HEADER)", pe.SyntaxError, "binary format takes no other option"),
    ("COPY (SELECT 1) TO STDOUT (QUOTE '''')", pe.SyntaxError, "only in CSV mode"),
    ("COPY (SELECT 1) TO STDOUT (FORMAT csv, DELIMITER '::')", pe.SyntaxError, "single one-byte character"),
    ("COPY (SELECT 1) TO STDOUT (FREEZE)", pe.FeatureNotSupported, "option 'freeze' is not supported"),
    ("COPY (SELECT 1 AS a) TO STDOUT (FORMAT csv, FORCE_QUOTE (a, b))", pe.UndefinedColumn, "'b' is not in"),
    ("COPY (SELECT 1 TO STDOUT", pe.SyntaxError, "not closed"),
    ("COPY (SELECT x FROM nowhere) TO STDOUT", pe.UndefinedTable, "unknown store 'nowhere'"),
    ("COPY (SET x = 1) TO STDOUT", pe.SyntaxError, "must be a SELECT"),
])
def test_copy_refusals(pg: Pg, sql: str, error: type[Exception], words: str) -> None:
    with pg.connect(autocommit=True) as con:
        with pytest.raises(error, match=words) as info:
            with con.cursor().copy(sql) as cp:
                for _ in cp:
                    pass
        if "nowhere" in sql:  # the position is in the COPY text the client sent
            assert info.value.diag.statement_position == str(sql.index("nowhere") + 1)
        assert con.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.parametrize(("sql", "words"), [
    ("COPY () TO STDOUT", "the parentheses hold no query"),
    ("COPY 'x' TO STDOUT", "expected a store name or a query"),
    ("COPY accounts (id TO STDOUT", "the column list is not closed"),
    ("COPY (SELECT 1) STDOUT", "expected TO STDOUT after the query"),
    ("COPY (SELECT 1) TO STDOUT (FORMAT csv", "the option list is not closed"),
    ("COPY (SELECT 1) TO STDOUT WITH CSV SOMETHING", "unexpected 'SOMETHING' in the options"),
    ("COPY (SELECT 1) TO STDOUT WITH CSV FORCE QUOTE", "FORCE QUOTE needs"),
    ("COPY (SELECT 1) TO STDOUT WITH DELIMITER ;", "DELIMITER needs a quoted value"),
    ("COPY (SELECT 1) TO STDOUT (FORMAT csv, FORMAT text)", "conflicting or redundant option format"),
    ("COPY (SELECT 1) TO STDOUT (HEADER maybe)", "header takes a Boolean"),
    ("COPY (SELECT 1) TO STDOUT (NULL)", "null needs a value"),
    ("COPY (SELECT 1) TO STDOUT (ENCODING 'LATIN1')", "UTF8 only"),
    ("COPY (SELECT 1) TO STDOUT (FORMAT csv, QUOTE 'ab')", "quote and escape must be single"),
    ("COPY (SELECT 1) TO STDOUT (DELIMITER 'a')", "delimiter cannot be 'a'"),
    ("COPY (SELECT 1) TO STDOUT (FORMAT csv, DELIMITER '\"')", "delimiter and quote must be different"),
    ("COPY (SELECT 1) TO STDOUT (NULL E'a\\tb')", "null representation cannot use the delimiter"),
])
def test_copy_statement_errors_say_what_is_wrong(sql: str, words: str) -> None:
    """Each refusal of parse_copy (run over the wire by test_copy_refusals for a sample)."""
    with pytest.raises(GatewayError, match=re.escape(words)):
        parse_copy(sql)
