"""The iqgate SQL dialect: DuckDB's, plus ``AS OF POSITION``, ``EXPLAIN`` and positioned placeholders.

Stock sqlglot fails on ``AS OF POSITION`` (and with lenient error levels drops
it silently, which would turn a read-your-writes query into a stale read), and
parses ``EXPLAIN`` as an opaque Command. Both are first-class nodes here, so
the planner sees them in the AST and the generator writes them back.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.generators.duckdb import DuckDBGenerator
from sqlglot.parsers.duckdb import DuckDBParser
from sqlglot.tokenizer_core import TokenizerCore
from sqlglot.tokens import TokenType

from stores.iqv2.position import Position, PositionError

from .errors import InvalidPositionError, SqlSyntaxError
from .function_allowlist import ALLOWED_DUCKDB_FUNCTIONS, MAX_ARGUMENTS
from .positions import line_col
from .syntax_errors import syntax_error

__all__ = ["Dialect", "IqgateDialect", "PositionClause", "Explain", "Subscribe", "SubscribeOption", "parse_statement",
           "SQLGLOT_FAILURES"]


class PositionClause(exp.Expression):
    """``AS OF POSITION '<json>'``: the bound for every store in the statement.

    ``this`` is the string literal; ``meta["position_json"]`` is the parsed
    Position as compact JSON, validated at parse time so a bad token fails
    early with the literal's line and column (meta must stay deep-copyable).
    """

    arg_types = {"this": True}


class Explain(exp.Expression):
    """``EXPLAIN [ANALYZE | POSITION] <statement>``: POSITION (Materialize's EXPLAIN TIMESTAMP) says which
    Position each store partition would be read at, not how."""

    arg_types = {"this": True, "analyze": False, "position": False}


class Subscribe(exp.Expression):
    """A live answer: ``SUBSCRIBE [TO] store | (SELECT …) [WITH (option [= value], …)] [AS OF POSITION '…']``
    (Materialize's form), or ``SELECT … EMIT CHANGES [AS OF POSITION '…']`` (ksqlDB's, with ``emit_changes``).

    ``this`` is the table or the query; ``options`` SubscribeOption nodes; ``position`` a PositionClause (the
    resume point, or with a snapshot the Position it must be at or past). ``meta["start"]`` is where it begins.
    """

    arg_types = {"this": True, "options": False, "position": False, "emit_changes": False}


class SubscribeOption(exp.Expression):
    """``name [= value]`` in ``SUBSCRIBE … WITH (…)`` (a bare name means true, as in Materialize)."""

    arg_types = {"this": True, "expression": False}


def _positioned(fn: Any) -> Any:
    """Record where a placeholder token starts: ``?`` are numbered in text order from it."""

    def parse(self: Parser) -> exp.Expression | None:
        tok = self._prev
        node = fn(self)
        if node is not None:
            node.meta["start"] = tok.start
        return node

    return parse


_PG_JSON_PATH = {name: Postgres.Parser.FUNCTIONS[name] for name in ("JSON_EXTRACT_PATH", "JSON_EXTRACT_PATH_TEXT")}


def _json_call(name: str) -> Any:
    """sqlglot's DuckDB builder for ``name``, except with more than two arguments.

    Why: that builder keeps the first path argument and drops the rest, so
    ``json_extract_path_text(j, 'a', 'b')`` ran as ``j ->> '$.a'``: a wrong
    answer where PostgreSQL answers ``j -> 'a' ->> 'b'`` and DuckDB, whose
    function takes two arguments, refuses (s17). PostgreSQL's two functions
    now mean what they mean there (all-literal keys as sqlglot transpiles
    them from PostgreSQL, other keys one ``->`` at a time). sqlglot's
    ``json_extract_scalar``, which DuckDB does not have, stays a call with
    every argument, which DuckDB refuses by name (DuckDB's own json_extract
    and json_extract_string are refused by the argument count, ``_counted``).
    """
    duck = DuckDBParser.FUNCTIONS[name]

    def build(args: list[Any], dialect: Any) -> exp.Expression:
        if len(args) <= 2:
            return duck(args, dialect)
        if name not in _PG_JSON_PATH:
            return exp.Anonymous(this=name.lower(), expressions=args)
        if all(isinstance(a, exp.Literal) for a in args[1:]):
            return _PG_JSON_PATH[name](args)
        node = args[0]
        for i, key in enumerate(args[1:], start=2):
            last = i == len(args) and name == "JSON_EXTRACT_PATH_TEXT"
            node = (exp.JSONExtractScalar if last else exp.JSONExtract)(this=node, expression=key)
        return node

    return build


def _within(arg: exp.Expression, node: exp.Expression) -> bool:
    """Whether ``arg`` is ``node`` or below it, walking up its parents (cheap: a builder wraps an argument, it does
    not bury it). Each step must be held by its parent: a builder may have put the argument into a node it then
    rebuilt without it (``time_bucket``'s zone became a Var, its literal still pointing at the first node)."""
    while arg is not None:
        if arg is node:
            return True
        parent = arg.parent
        held = parent.args.get(arg.arg_key) if parent is not None else None
        if not (held is arg or (isinstance(held, list) and any(h is arg for h in held))):
            return False
        arg = parent
    return False


_WRITES_OTHER: dict[tuple[str, int], bool] = {}

# Typed nodes kept even when sqlglot writes them back under another name: the planner reads them (aggregates
# for row-changing and pushdown, generate_series/range for value sizes and harmless table functions, mod/lower/
# upper for constant folding), and PostgreSQL gives lpad/rpad a default pad.
_KEEP_TYPED = (exp.AggFunc, exp.GenerateSeries, exp.Repeat, exp.Mod, exp.Lower, exp.Upper, exp.Pad)


def _writes_other(name: str, build: Callable[[list[Any]], Any], n: int) -> bool:
    """Whether sqlglot writes a call of ``name`` with ``n`` arguments back as anything but that call: fewer
    arguments, another order, another name or shape, or with a note that it cannot write it as given. Found
    once per (name, count) on placeholder columns, so the cost of a statement stays linear in its calls however
    deeply they nest."""
    key = (name, n)
    if key not in _WRITES_OTHER:
        markers = [exp.column(f"__iq_arg_{i}__") for i in range(n)]
        generator = _DIALECT.generator(unsupported_level=ErrorLevel.IGNORE)  # notes kept, not logged
        try:
            text = generator.generate(build(list(markers))).lower().replace('"', "")
            same = f"{name.lower()}({', '.join(f'__iq_arg_{i}__' for i in range(n))})"
            other = bool(generator.unsupported_messages) or text != same
        except Exception:  # noqa: BLE001 - placeholders a builder cannot take say nothing about real arguments
            other = False
        _WRITES_OTHER[key] = other
    return _WRITES_OTHER[key]


_RENAMED: dict[tuple[str, int], str | None] = {}
_RENAMING = threading.RLock()
_FINDING: set[tuple[str, int]] = set()


def _renamed_to(name: str, n: int) -> str | None:
    """The other name sqlglot writes DuckDB's ``name`` with ``n`` arguments under, when that is all it changes
    (the same arguments in the same order), else None.

    Why: the calls kept as typed nodes (aggregates above all, ``_KEEP_TYPED``)
    are written under sqlglot's name for them: ``list(x)`` as ``ARRAY_AGG(x)``,
    ``string_agg(x, ',')`` as ``LISTAGG(x, ',')``, ``max_by`` as ``ARG_MAX``. The
    function is the same in DuckDB, but DuckDB names an unaliased column after
    the text, so the column was ``array_agg(x)``. The generator writes the
    user's name back (``Generator.sql``). Found once per (name, count) from
    placeholder columns, through the parser, so calls with syntax of their own
    (``string_agg(x, ',' ORDER BY y)``) are found as well.
    """
    key = (name, n)
    if key in _RENAMED:
        return _RENAMED[key]
    with _RENAMING:  # one thread finds it; the others wait for the answer
        if key in _RENAMED:
            return _RENAMED[key]
        if key in _FINDING:  # this thread, writing the placeholder call below: written as sqlglot writes it
            return None
        _FINDING.add(key)
        other = None
        try:
            if name in ALLOWED_DUCKDB_FUNCTIONS:
                args = ", ".join(f"__iq_arg_{i}__" for i in range(n))
                try:
                    statement = _DIALECT.parse(f"SELECT {name}({args})", error_level=ErrorLevel.IMMEDIATE)[0]
                    text = _DIALECT.generator(unsupported_level=ErrorLevel.IGNORE).generate(statement)
                except Exception:  # noqa: BLE001 - placeholders a call cannot take say nothing about real arguments
                    text = ""
                m = re.fullmatch(rf"SELECT (\w+)\({re.escape(args)}\)", text)
                if m is not None and m.group(1).lower() != name:
                    other = m.group(1)
        finally:
            _FINDING.discard(key)
        _RENAMED[key] = other
        return other


def _counted(name: str, builder: Any) -> Any:
    """``builder`` that also notes on the node it builds the name called and how many arguments it was given.

    Why: sqlglot's builders keep the arguments they know and silently drop
    the rest. Past what DuckDB's function takes (``instr(s, t, 3)`` ran as
    ``instr(s, t)``, ``log10(x, y)`` as ``log10(x)``), a call DuckDB refuses got
    an answer: the guard compares the count (guard.check_argument_counts).
    Within it, a DuckDB call lost its meaning: ``jaro_winkler_similarity(a, b,
    0.99)`` ignored its cutoff, ``time_bucket(w, ts, 'America/New_York')``
    read the zone as a column. A call of DuckDB's own function whose
    arguments the builder did not all keep as given goes to DuckDB as written.
    """
    wants_dialect = "dialect" in builder.__code__.co_varnames  # as sqlglot's parser decides how to call it
    duckdbs = name.lower() in ALLOWED_DUCKDB_FUNCTIONS

    def call(args: list[Any]) -> Any:
        return builder(args, _DIALECT) if wants_dialect else builder(args)

    def build(args: list[Any], dialect: Any) -> Any:
        given = list(args)
        node = builder(args, dialect) if wants_dialect else builder(args)
        if not isinstance(node, exp.Expression):
            return node
        if duckdbs and not isinstance(node, _KEEP_TYPED) and (
                any(isinstance(a, exp.Expression) and not _within(a, node) for a in given)
                or _writes_other(name, call, len(given))):
            node = exp.Anonymous(this=name.lower(), expressions=given)
        node.meta["call"] = (name.lower(), len(given))
        return node

    return build


_OPENS = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE}
_CLOSES = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE}


def _arguments_between(tokens: list[Any], start: int, end: int) -> int:
    """How many comma-separated arguments the tokens of a call hold (an ORDER BY inside ends the count)."""
    if start >= end:
        return 0
    depth, given = 0, 1
    for tok in tokens[start:end]:
        if tok.token_type in _OPENS:
            depth += 1
        elif tok.token_type in _CLOSES:
            depth -= 1
        elif depth == 0 and tok.token_type == TokenType.COMMA:
            given += 1
        elif depth == 0 and tok.token_type == TokenType.ORDER_BY:
            break
    return given


def _counted_parser(name: str, parse: Any) -> Any:
    """A function parser of sqlglot's (calls with syntax of their own: ``string_agg(x, ',' ORDER BY y)``,
    ``arg_max(x, y, n)``) that also notes its name and argument count, as ``_counted`` does for builders."""

    def run(self: Parser) -> Any:
        start = self._index
        node = parse(self)
        if isinstance(node, exp.Expression):
            node.meta["call"] = (name.lower(), _arguments_between(self._tokens, start, self._index))
            if start >= 2:  # the name, then "(": errors about the call point at its name
                node.meta.setdefault("start", self._tokens[start - 2].start)
        return node

    return run


class Parser(DuckDBParser):
    FUNCTION_PARSERS = {
        **DuckDBParser.FUNCTION_PARSERS,
        **{name: _counted_parser(name, parse) for name, parse in DuckDBParser.FUNCTION_PARSERS.items()
           if name.lower() in MAX_ARGUMENTS},
    }

    FUNCTIONS = {
        **{name: _counted(name, builder) for name, builder in DuckDBParser.FUNCTIONS.items()},
        "JSON_EXTRACT_SCALAR": _counted("JSON_EXTRACT_SCALAR", _json_call("JSON_EXTRACT_SCALAR")),
        # PostgreSQL's, with more arguments than DuckDB's two: _json_call gives them their PostgreSQL meaning
        **{name: _json_call(name) for name in ("JSON_EXTRACT_PATH", "JSON_EXTRACT_PATH_TEXT")},
    }

    PLACEHOLDER_PARSERS = {
        **DuckDBParser.PLACEHOLDER_PARSERS,
        TokenType.PLACEHOLDER: _positioned(DuckDBParser.PLACEHOLDER_PARSERS[TokenType.PLACEHOLDER]),
        TokenType.COLON: _positioned(DuckDBParser.PLACEHOLDER_PARSERS[TokenType.COLON]),
    }

    QUERY_MODIFIER_PARSERS = {
        **DuckDBParser.QUERY_MODIFIER_PARSERS,
        TokenType.ALIAS: lambda self: ("position", self._parse_position_clause()),
    }
    QUERY_MODIFIER_TOKENS = set(QUERY_MODIFIER_PARSERS)

    def _at_as_of_position(self) -> bool:
        cur, nxt = self._curr, self._next
        if not cur or cur.token_type != TokenType.ALIAS or not nxt or nxt.text.upper() != "OF":
            return False
        after = self._tokens[self._index + 2] if self._index + 2 < len(self._tokens) else None
        return after is not None and after.text.upper() == "POSITION"

    def _parse_position_clause(self) -> PositionClause | None:
        if not self._at_as_of_position():
            return None
        self._advance(3)
        tok = self._curr
        if not tok or tok.token_type != TokenType.STRING:
            where = tok or self._prev
            line, col = (where.line, where.col) if where else (None, None)
            raise SqlSyntaxError("AS OF POSITION must be followed by a string literal holding a JSON position", line=line, col=col)
        literal = self._parse_primary()
        try:
            position = Position.from_json(tok.text)
        except PositionError as err:
            line, col = line_col(self.sql, tok.start)
            raise InvalidPositionError(f"invalid AS OF POSITION: {err}", line=line, col=col) from None
        clause = PositionClause(this=literal)
        clause.meta["position_json"] = position.to_json()
        clause.meta["start"] = tok.start
        return clause

    def _parse_table_alias(self, alias_tokens: Any = None) -> exp.TableAlias | None:
        if self._at_as_of_position() or self._at_emit_changes():
            return None
        return super()._parse_table_alias(alias_tokens)

    def _at_emit_changes(self) -> bool:
        cur, nxt = self._curr, self._next
        return bool(cur and nxt and cur.text.upper() == "EMIT" and nxt.text.upper() == "CHANGES"
                    and cur.token_type not in (TokenType.STRING, TokenType.IDENTIFIER))

    def _at_word(self, word: str) -> bool:
        cur = self._curr
        return bool(cur and cur.text.upper() == word and cur.token_type not in (TokenType.STRING, TokenType.IDENTIFIER))

    def _parse_subscribe(self) -> Subscribe:
        """After ``SUBSCRIBE``: ``[TO] store | (query)``, then ``WITH (…)`` and ``AS OF POSITION '…'``."""
        start = self._curr.start if self._curr else 0
        self._advance()
        if self._at_word("TO"):
            self._advance()
        if self._curr is None or self._curr.token_type == TokenType.SENTINEL:
            self.raise_error("SUBSCRIBE needs a store name or a parenthesized SELECT", self._prev)
        if self._match(TokenType.L_PAREN):
            inner = self._parse_statement()
            if inner is None:
                self.raise_error("SUBSCRIBE (…) needs a SELECT inside the parentheses")
            self._match_r_paren()
        else:
            inner = self._parse_table_parts()
            if inner is None or not inner.name:
                self.raise_error("SUBSCRIBE needs a store name or a parenthesized SELECT")
        options = None
        if self._match(TokenType.WITH):
            self._match_l_paren()
            options = self._parse_csv(self._parse_subscribe_option)
            self._match_r_paren()
        for word, what in (("ENVELOPE", "ENVELOPE is not supported: a subscription always sends upserts and deletes "
                                        "by the store's key"),
                           ("UP", "UP TO is not supported: a subscription runs until it is closed")):
            if self._at_word(word):
                self.raise_error(what)
        node = Subscribe(this=inner, options=options, position=self._parse_position_clause())
        node.meta["start"] = start
        return node

    def _parse_subscribe_option(self) -> SubscribeOption | None:
        tok = self._curr
        name = self._parse_var(any_token=True)
        if name is None or tok is None:
            self.raise_error("expected an option name (SNAPSHOT or PROGRESS) in SUBSCRIBE … WITH (…)")
            return None
        value = None
        if self._match(TokenType.EQ):
            value = self._parse_primary() or self._parse_var(any_token=True)
            if value is None:
                self.raise_error(f"expected a value after {name.name} =")
        node = SubscribeOption(this=exp.to_identifier(name.name), expression=value)
        node.meta["start"] = tok.start
        return node

    def _parse_map(self) -> exp.ToMap | exp.Map:
        """``map(keys, values)`` is parsed by its keyword and kept two arguments: a third was dropped where DuckDB
        refuses the call. Its count is noted as ``_counted`` notes a builder's (the guard compares it)."""
        start = self._index  # at "(" (or "{" of MAP {k: v}), after the keyword
        node = super()._parse_map()
        if isinstance(node, exp.Map):
            node.meta["call"] = ("map", _arguments_between(self._tokens, start + 1, self._index - 1))
            node.meta.setdefault("start", self._tokens[start - 1].start)
        return node

    def _parse_alias(self, this: exp.Expr | None, explicit: bool = False) -> exp.Expr | None:
        if self._at_as_of_position() or self._at_emit_changes():
            return this
        return super()._parse_alias(this, explicit)

    def _parse_expression(self) -> exp.Expr | None:
        # DuckDB's prefix alias (``name: expr``) must not swallow ``SELECT :p``: a keyword is no alias.
        if self._curr is not None and self._curr.token_type == TokenType.SELECT:
            return super(DuckDBParser, self)._parse_expression()
        return super()._parse_expression()

    def _parse_statement(self) -> exp.Expr | None:
        if self._curr and self._curr.text.upper() == "EXPLAIN":
            self._advance()
            analyze = self._match_text_seq("ANALYZE")
            position = not analyze and self._match_text_seq("POSITION")
            inner = self._parse_statement()
            if inner is None:
                self.raise_error("EXPLAIN needs a statement to explain")
            return Explain(this=inner, analyze=analyze, position=position)
        if self._at_word("SUBSCRIBE") and self._curr.token_type == TokenType.VAR:
            return self._parse_subscribe()
        start = self._curr.start if self._curr else 0
        statement = super()._parse_statement()
        if statement is not None and self._at_emit_changes():
            self._advance(2)
            node = Subscribe(this=statement, emit_changes=True, position=self._parse_position_clause())
            node.meta["start"] = start
            return node
        return statement



class _QuietCommandFallback(logging.Filter):
    """sqlglot logs "'<the user's SQL>' contains unsupported syntax. Falling back to parsing as a 'Command'" for
    statements it cannot parse fully (RESET ALL, LOAD …): user SQL in the server log, and the planner decides
    what to do with a Command anyway (run it or refuse it with a clear error)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_QuietCommandFallback())


class Generator(DuckDBGenerator):
    TRANSFORMS = {
        **DuckDBGenerator.TRANSFORMS,
        Explain: lambda self, e: self.explain_sql(e),
        PositionClause: lambda self, e: self.positionclause_sql(e),
        Subscribe: lambda self, e: self.subscribe_sql(e),
        SubscribeOption: lambda self, e: self.subscribeoption_sql(e),
    }

    def subscribe_sql(self, expression: Subscribe) -> str:
        position = expression.args.get("position")
        tail = f" {self.sql(position)}" if position is not None else ""
        if expression.args.get("emit_changes"):
            return f"{self.sql(expression, 'this')} EMIT CHANGES{tail}"
        inner = expression.this
        what = self.sql(inner) if isinstance(inner, exp.Table) else f"({self.sql(inner)})"
        options = expression.args.get("options")
        opts = f" WITH ({', '.join(self.sql(o) for o in options)})" if options else ""
        return f"SUBSCRIBE {what}{opts}{tail}"

    def subscribeoption_sql(self, expression: SubscribeOption) -> str:
        value = expression.args.get("expression")
        return self.sql(expression, "this") + ("" if value is None else f" = {self.sql(value)}")

    def query_modifiers(self, expression: exp.Expr, *sqls: str) -> str:
        text = super().query_modifiers(expression, *sqls)
        clause = expression.args.get("position")
        if clause is not None:
            text += f" AS OF POSITION {self.sql(clause, 'this')}"
        return text

    def explain_sql(self, expression: Explain) -> str:
        analyze = " ANALYZE" if expression.args.get("analyze") else " POSITION" if expression.args.get("position") else ""
        return f"EXPLAIN{analyze} {self.sql(expression, 'this')}"

    def positionclause_sql(self, expression: PositionClause) -> str:
        return f"AS OF POSITION {self.sql(expression, 'this')}"

    def sql(self, expression: Any, key: str | None = None, comment: bool = True) -> str:
        text = super().sql(expression, key, comment)
        if key is None and isinstance(expression, exp.Func) and expression._meta:
            call = expression.meta.get("call")
            other = _renamed_to(*call) if call is not None else None
            if other is not None and text[:len(other) + 1].upper() == other.upper() + "(":
                text = call[0] + text[len(other):]
        return text

    # DuckDB names an output column after the text of its expression: ``x IS NOT NULL`` and ``IF(c, a, b)``
    # are written as the user wrote them (sqlglot writes ``NOT x IS NULL`` and a CASE), so the column is named
    # as DuckDB names it. The meaning is the same either way.
    def not_sql(self, expression: exp.Not) -> str:
        inner = expression.this
        if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
            return f"{self.sql(inner, 'this')} IS NOT NULL"
        return super().not_sql(expression)

    def if_sql(self, expression: exp.If) -> str:
        if expression.args.get("false") is None:
            return super().if_sql(expression)
        return self.func("IF", expression.this, expression.args.get("true"), expression.args.get("false"))


class _Tokenizer(DuckDB.Tokenizer):
    # EXPLAIN is a Command keyword upstream (the rest of the text becomes one
    # opaque string); here it is an ordinary word the statement parser reads.
    # APPLY is T-SQL's CROSS APPLY upstream, which DuckDB does not have; in DuckDB it is the list function
    # apply(list, lambda), which was a syntax error (s18).
    KEYWORDS = {**{k: v for k, v in DuckDB.Tokenizer.KEYWORDS.items() if k != "APPLY"}, "EXPLAIN": TokenType.VAR}

    def _init_core(self) -> TokenizerCore:
        core = super()._init_core()
        if type(core) is TokenizerCore:  # the pure-Python tokenizer (sqlglot's compiled one cannot be subclassed)
            core.__class__ = _TokenizerCore
        return core


class _TokenizerCore(TokenizerCore):
    """``$1,$2`` was a syntax error ("Error tokenizing"): sqlglot reads ``$`` as the start of a dollar-quoted
    string whose tag runs to the next ``$`` (``1,``), and only a tag of digits alone counts as a parameter. In
    PostgreSQL and DuckDB a tag cannot start with a digit, so ``$`` before a digit is always a parameter."""

    __slots__ = ()

    def _scan_string(self, start: str) -> bool:
        if start == "$" and self._peek.isdigit():
            self._add(TokenType.PARAMETER)
            return True
        return super()._scan_string(start)


class IqgateDialect(DuckDB):
    """DuckDB SQL with iqgate's extensions; ``sqlglot.parse_one(sql, read=Dialect)`` works.

    The class must not be *named* ``Dialect``: sqlglot registers dialect
    classes by name and would replace its own base dialect.
    """

    Tokenizer = _Tokenizer
    parser_class = Parser
    generator_class = Generator


Dialect = IqgateDialect
_DIALECT = IqgateDialect()
# What sqlglot's parser and generator raise on input they do not expect (their bugs, not ours or the user's)
SQLGLOT_FAILURES = (IndexError, KeyError, AttributeError, TypeError, ValueError)

_SHOW_ALL = re.compile(r"\s*show\s+all\s*;?\s*", re.IGNORECASE)


def parse_statement(sql: str) -> exp.Expression:
    """Exactly one statement, or a SqlSyntaxError with line and column.

    Errors are raised immediately (never ``IGNORE``) so no clause is dropped.
    """
    if _SHOW_ALL.fullmatch(sql):  # the parser of sqlglot's duckdb dialect fails on it (IndexError)
        return exp.Command(this="SHOW", expression=exp.Literal.string("ALL"))
    try:
        statements = _DIALECT.parse(sql, error_level=ErrorLevel.IMMEDIATE)
    except ParseError as err:
        raise syntax_error(err) from None
    except TokenError as err:
        raise SqlSyntaxError(f"syntax error: {err}") from None
    except SQLGLOT_FAILURES as err:
        # sqlglot's own failure on input its grammar does not expect (``SHOW ALL`` was an IndexError): still the
        # statement's syntax, never an internal error
        raise SqlSyntaxError(f"syntax error: the statement could not be parsed ({type(err).__name__} in the "
                             "parser)") from None
    statements = [s for s in statements if s is not None]
    if not statements:
        raise SqlSyntaxError("empty statement: expected SELECT, WITH, VALUES, EXPLAIN, SHOW, DESCRIBE or SET")
    if len(statements) > 1:
        second = statements[1]
        line, col = _first_position(sql, second)
        raise SqlSyntaxError("only one statement per request is allowed; found more than one", line=line, col=col)
    return statements[0]


def _first_position(sql: str, node: exp.Expression) -> tuple[int | None, int | None]:
    for sub in node.walk():
        start = sub.meta.get("start") if sub._meta else None
        if start is not None:
            return line_col(sql, start)
    return None, None


def position_literal_json(clause: PositionClause) -> str:
    """The clause's position as compact JSON (what EXPLAIN prints)."""
    return clause.meta["position_json"]


# sqlglot looks dialects up by class; make ``read="iqgate"`` work too.
sqlglot.dialects.dialect.Dialect.classes["iqgate"] = IqgateDialect
