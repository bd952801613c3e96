"""What the terminal commands share: printing results as psql-like tables, and ending the process on a fatal
error (stopping a server on request is ``gateway.serving.stopping``)."""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from ..engine.json_values import dumps, json_default

__all__ = ["print_table", "print_result", "die"]


# -- output ---------------------------------------------------------------------------------
def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, dict)):
        return dumps(v)
    return str(json_default(v))


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO) -> None:
    """A plain text table, numbers right-aligned, like psql's."""
    cells = [[str(_cell(v)) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in rows if r[i] is not None)
               for i in range(len(columns))]
    out.write(" | ".join(c.ljust(w) for c, w in zip(columns, widths)) + "\n")
    out.write("-+-".join("-" * w for w in widths) + "\n")
    for r in cells:
        out.write(" | ".join(v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
                  + "\n")
    out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n")


def print_result(body: dict[str, Any], fmt: str, out: TextIO) -> None:
    columns = [c["name"] for c in body["columns"]]
    if fmt == "json":
        out.write(dumps(body) + "\n")
    elif fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        for r in body["rows"]:
            w.writerow(["" if v is None else (dumps(v) if isinstance(v, (list, dict)) else v) for v in r])
    else:
        print_table(columns, body["rows"], out)
        failed = [p for p in body.get("partitions", []) if p.get("failure_reason")]
        for p in failed:
            out.write(f"partition {p['store']}/{p['partition']} failed: {p['failure_reason']}: "
                      f"{p['failure_message']}\n")
        if body.get("position"):
            out.write(f"position: {json.dumps(body['position'], separators=(',', ':'))}\n")



def die(exc: BaseException) -> None:
    """An essential thread died: say why and end the process non-zero, so a supervisor restarts it.

    Raising in that thread would leave the process up with a port that answers nothing.
    """
    print(f"iqgate: the HTTP server stopped ({type(exc).__name__}: {exc}); exiting", file=sys.stderr, flush=True)
    os._exit(70)
