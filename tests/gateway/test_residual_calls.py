"""The residual evaluator's scalar functions and CASE (gateway/engine/residual/calls.py) against DuckDB, its oracle.

Property: for generated calls of every function the evaluator takes, over
their own and other argument types (columns, literals, parameters, nested
calls) and generated rows (NULLs, non-ASCII text, spaces, RE2
metacharacters, the extremes of BIGINT and INTEGER), whenever the evaluator
answers, its rows are exactly DuckDB's rows for the same residual SQL over
the same relation: the same Python types, the same values, and no answer
where DuckDB reports an error (an invalid pattern, an overflow). The test in
``test_residual_eval.py`` mixes the same calls into its general statements;
this one makes sure every call is answered often.

Then through ``Gateway.sql``: learned from DuckDB's first answer, answered
without it afterwards (the point lane, for a lookup by key), the same rows,
columns and Arrow.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest

import planner
from gateway import Gateway
from gateway.engine.arrow_rows import ScanRows
from gateway.engine.errors import ExecutionError
from gateway.engine.residual.evaluator import Fallback, Unsupported, compile_for, signature
from planner.residual_program import Case, Func
from stores.app.streams import StoreTopology, StreamsApp
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.gateway.test_residual_eval import CATALOG, SPEC, _rows, _same

TEXTS = ["c", "c", "c", "'a'", "'Ab c'", "''", "'é'", "?"]
NUMBERS = ["a", "i", "b", "k", "1", "-7", "2.5", "1e3", "?"]
PATTERNS = ["'a'", "'b'", "''", "' '", "'a b'", "'é'", "'.'", "'(x'", "?"]
REPLACEMENTS = ["'k'", "''", "'é'", "'\\1'", "'.'", "?"]
TEXT_PARAMS: list[Any] = ["a", "b", "", " ", "é", "a.b", "\\0", "A", 3, None]
NUMBER_PARAMS: list[Any] = [0, 3, -1, 2**31, 2**63 - 1, 0.5, 2.25, "a", None]


class _Calls:
    """Generates one call (or CASE) and the parameters it reads."""

    def __init__(self, rnd: random.Random) -> None:
        self.r = rnd
        self.params: list[Any] = []

    def _arg(self, options: list[str], params: list[Any]) -> str:
        a = self.r.choice(options)
        if a == "?":
            self.params.append(self.r.choice(params))
        return a

    def text(self, depth: int = 0) -> str:
        if depth < 1 and self.r.random() < 0.25:
            return self.call(depth + 1, text=True)
        return self._arg(TEXTS, TEXT_PARAMS)

    def number(self, depth: int = 0) -> str:
        if depth < 1 and self.r.random() < 0.2:
            return self.call(depth + 1, text=False)
        return self._arg(NUMBERS, NUMBER_PARAMS)

    def condition(self) -> str:
        return self.r.choice([f"{self.number(1)} > {self.number(1)}", f"{self.text(1)} = {self.text(1)}",
                              "f", f"{self.text(1)} IS NULL", f"starts_with({self.text(1)}, {self.text(1)})"])

    def call(self, depth: int = 0, text: bool | None = None) -> str:
        t, n = (lambda: self.text(depth)), (lambda: self.number(depth))
        texts = [
            lambda: f"upper({t()})", lambda: f"lower({t()})", lambda: f"trim({t()})", lambda: f"ltrim({t()})",
            lambda: f"rtrim({t()})",
            lambda: f"regexp_replace({t()}, {self._arg(PATTERNS, TEXT_PARAMS)}, "
                    f"{self._arg(REPLACEMENTS, TEXT_PARAMS)})",
            lambda: f"regexp_replace({t()}, {self._arg(PATTERNS, TEXT_PARAMS)}, "
                    f"{self._arg(REPLACEMENTS, TEXT_PARAMS)}, 'g')",
            lambda: f"replace({t()}, {self._arg(PATTERNS, TEXT_PARAMS)}, {self._arg(REPLACEMENTS, TEXT_PARAMS)})",
            lambda: f"concat({', '.join(self.r.choice([t, t, n, lambda: 'NULL', lambda: 'f'])() for _ in range(3))})",
            lambda: f"{t()} || {self.r.choice([t, t, n])()}",
            lambda: f"coalesce({t()}, {t()})", lambda: f"ifnull({t()}, 'none')",
            lambda: f"CASE WHEN {self.condition()} THEN {t()} ELSE {t()} END",
            lambda: f"nullif({t()}, {t()})",
        ]
        numbers = [
            lambda: f"length({t()})", lambda: f"abs({n()})", lambda: f"coalesce({n()}, {n()})",
            lambda: f"coalesce({n()}, NULL, {n()})", lambda: f"nullif({n()}, {n()})",
            lambda: f"CASE WHEN {self.condition()} THEN {n()} END",
            lambda: f"CASE {n()} WHEN {n()} THEN {n()} WHEN {n()} THEN {n()} ELSE {n()} END",
            lambda: f"if({self.condition()}, {n()}, {n()})", lambda: f"{n()} + 1",
            lambda: f"starts_with({t()}, {t()})", lambda: f"contains({t()}, {t()})",
        ]
        pool = texts if text else numbers if text is False else texts + numbers
        return self.r.choice(pool)()

    def statement(self) -> str:
        roll = self.r.random()

        def alias(i: int) -> str:  # an unnamed output with a parameter is DuckDB's (named after its value)
            return f" AS x{i}" if self.r.random() < 0.7 else ""
        if roll < 0.6:
            body = f"SELECT {self.call()}{alias(0)}, {self.call()}{alias(1)} FROM t"
        elif roll < 0.8:
            body = f"SELECT k, {self.call()}{alias(0)} FROM t WHERE {self.call(text=False)} IS NOT NULL"
        elif roll < 0.9:
            body = (f"SELECT count(*), max({self.call(text=True)}){alias(0)}, sum(length({self.text()})){alias(1)} "
                    "FROM t")
        else:
            body = f"SELECT k FROM t WHERE {self.call(text=True)} = {self.text()} OR contains({self.text()}, 'a')"
        return body


def _names(node: Any, out: set[str]) -> None:
    if isinstance(node, Func):
        out.add(node.name)
    elif isinstance(node, Case):
        out.add("CASE")
    if isinstance(node, tuple):
        for x in node:
            _names(x, out)
    elif hasattr(node, "__dataclass_fields__"):
        for name in node.__dataclass_fields__:
            _names(getattr(node, name), out)


def test_every_call_gives_duckdbs_answer() -> None:
    rnd = random.Random(20260501)
    con = duckdb.connect()
    answered: Counter[str] = Counter()
    declined = 0
    disagreements: list[str] = []
    for _ in range(4_000):
        gen = _Calls(rnd)
        sql = gen.statement()
        try:
            plan = planner.plan(sql, CATALOG, params=gen.params or None, session={"table_scans": True})
        except planner.PlanningError:
            continue
        program = plan.residual_program
        if program is None:
            continue
        rows = _rows(rnd)
        try:
            ours = compile_for(program, signature(plan.residual_values)).run(rows, plan.residual_values)
        except (Unsupported, Fallback):
            declined += 1
            continue
        con.register(plan.scans[0].relation, ScanRows(SPEC, rows=rows).to_arrow(False))
        try:
            duck = con.execute(plan.residual_sql).fetchall()
        except duckdb.Error as exc:
            disagreements.append(f"{sql} {gen.params!r} over {rows!r}: ours {ours!r}, DuckDB raised {exc}")
            continue
        if not _same(ours, duck):
            disagreements.append(f"{sql} {gen.params!r} over {rows!r}: ours {ours!r}, DuckDB {duck!r}")
        names: set[str] = set()
        _names(program, names)
        answered.update(names)
    assert not disagreements, "\n".join(disagreements[:10])
    everything = {"upper", "lower", "length", "trim", "ltrim", "rtrim", "regexp_replace", "regexp_replace_g",
                  "replace", "concat", "||", "coalesce", "nullif", "abs", "starts_with", "contains", "CASE"}
    assert {n for n, c in answered.items() if c >= 20} == everything, answered  # each call answered, often
    assert declined > 500, declined  # and the escape hatches are taken


@pytest.mark.parametrize(("sql", "params"), [
    ("SELECT regexp_replace(c, '(x', 'k') FROM t WHERE k = 99", []),  # no row: DuckDB's error for the pattern
    ("SELECT regexp_replace(c, ?, 'k') AS r FROM t WHERE k = 99", ["[a"]),
    ("SELECT upper(c) FROM t", []),  # ß: DuckDB's Unicode case mapping
    ("SELECT abs(a) FROM t", []),  # abs(-2^63): DuckDB's overflow error
])
def test_what_only_duckdb_knows_is_declined(sql: str, params: list[Any]) -> None:
    rows = [(1, -(2**63), None, None, "Straße", None, 0, None)]
    plan = planner.plan(sql, CATALOG, params=params or None, session={"table_scans": True})
    with pytest.raises(Fallback):
        compile_for(plan.residual_program, signature(plan.residual_values)).run(rows, plan.residual_values)


def test_a_constant_call_or_a_parameter_typed_output_is_duckdbs() -> None:
    """A call of constants only is folded by DuckDB; an output whose type a parameter decides is learned once per
    program, so neither is the evaluator's."""
    plan = planner.plan("SELECT upper('a'), c FROM t WHERE k = 1", CATALOG)
    with pytest.raises(Unsupported):
        compile_for(plan.residual_program, ())
    assert planner.plan("SELECT coalesce(a, ?) FROM t WHERE k = 1", CATALOG, params=[1]).residual_program is None
    assert planner.plan("SELECT upper(?) AS u FROM t WHERE k = 1", CATALOG, params=["a"]).residual_program is not None


@pytest.mark.parametrize("sql", [
    "SELECT regexp_replace(c, ?, 'k') FROM t WHERE k = 1", "SELECT c || ? FROM t WHERE k = 1",
    "SELECT max(concat(c, ?)) FROM t WHERE k = 1",
])
def test_an_unnamed_output_with_a_parameter_is_duckdbs(sql: str) -> None:
    """DuckDB names such a column after the parameter's value (inlined in the residual SQL): the columns a
    program learns once would name it after the first call's value."""
    assert planner.plan(sql, CATALOG, params=["a"]).residual_program is None
    assert planner.plan(sql.replace(" FROM", " AS x FROM"), CATALOG, params=["a"]).residual_program is not None


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp: Path = tmp_path_factory.mktemp("residual-calls")
    app = StreamsApp(StoreTopology([SPEC]), application_id="residual-calls", state_dir=tmp / "state",
                     coordination_base=tmp / "coord")
    app.start()
    rows = [Change(k, (k * 3, k, k / 4, f"c{k} x" if k % 3 else f"Cé{k}", k % 2 == 0)) for k in range(10)]
    rows.append(Change(10, (None, None, None, None, None)))
    rows.append(Change(11, (-(2**63), -(2**31), -0.0, "Straße", None)))
    app.writer("t").write_batch(1, rows, Position.from_map({"src": {0: 12}}))
    g = Gateway(app)
    yield g
    g.close()
    app.close()


@pytest.mark.parametrize(("sql", "params", "lane"), [
    ("SELECT k, regexp_replace(c, 'c', 'k') FROM t WHERE k = ?", [4], True),
    ("SELECT upper(c), length(c), trim(c) FROM t WHERE k = ?", [1], True),
    ("SELECT coalesce(c, 'none'), CASE WHEN a > 10 THEN 'big' ELSE 'small' END FROM t WHERE k = ?", [10], True),
    ("SELECT concat(c, '-', a, f), c || ? AS bang FROM t WHERE k = ?", ["!", 5], True),
    ("SELECT k, regexp_replace(c, ?, 'k') AS r FROM t WHERE k = ?", ["c", 4], True),
    ("SELECT nullif(i, 3), abs(b), if(f, a, i) FROM t WHERE k = ?", [3], True),
    ("SELECT k FROM t WHERE k IN (1, 2, 3, 4, 5) AND (starts_with(c, 'c') OR contains(c, ?))", ["é"], False),
    ("SELECT count(*), max(upper(c)) FROM t WHERE k IN (1, 2, 4) AND replace(c, ' ', '') <> ''", [], False),
])
def test_gateway_answers_calls_the_same_with_and_without_duckdb(gw: Gateway, sql: str, params: list[Any],
                                                               lane: bool) -> None:
    first = gw.sql(sql, params=params)  # DuckDB answers, the evaluator learns the columns
    program = gw._plan(sql, params, {}).residual_program
    assert program is not None and gw._programs.columns(program) is not None
    second = gw.sql(sql, params=params)  # answered without DuckDB
    assert first.route == "duckdb" and second.route == ("point lane" if lane else "evaluator")
    assert second.columns == first.columns
    assert _same(second.rows(), first.rows())
    assert second.position == first.position and second.partitions == first.partitions
    assert second.to_arrow().equals(first.to_arrow())
    assert gw.sql(sql, params=params, arrow=True).to_arrow().equals(first.to_arrow())


def test_a_parameter_never_names_a_learned_column(gw: Gateway) -> None:
    """The same statement with another parameter: DuckDB's column name for it, whoever answers."""
    for sql in ("SELECT regexp_replace(c, ?, 'k') FROM t WHERE k = 4", "SELECT c || ? AS x FROM t WHERE k = 4"):
        for value in ("c", "x", "c", "4"):
            got = gw.sql(sql, params=[value])
            name = "x" if "AS x" in sql else f"regexp_replace(c, '{value}', 'k')"
            assert got.columns[0][0] == name, got.columns
            assert got.rows() == gw.sql(sql, params=[value]).rows()


def test_errors_and_unicode_stay_duckdbs(gw: Gateway) -> None:
    """Learned on an ASCII row, a program still leaves ß and an overflow to DuckDB (its answer, its error)."""
    upper = "SELECT upper(c) FROM t WHERE k = ?"
    assert gw.sql(upper, params=[1]).rows() == [("C1 X",)]
    assert gw.sql(upper, params=[1]).route == "point lane"
    duck = duckdb.connect().execute("SELECT upper('Straße')").fetchall()
    assert gw.sql(upper, params=[11]).rows() == duck
    absolute = "SELECT abs(a) FROM t WHERE k = ?"
    assert gw.sql(absolute, params=[2]).rows() == [(6,)]
    with pytest.raises(ExecutionError, match="Overflow"):
        gw.sql(absolute, params=[11]).rows()
    with pytest.raises(ExecutionError, match="missing \\)"):  # DuckDB's error for the pattern, though no row matches
        gw.sql("SELECT regexp_replace(c, '(x', 'k') FROM t WHERE k = ?", params=[99]).rows()
