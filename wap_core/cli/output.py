"""How the CLI prints: one-line errors, tables with blanks for empty values, JSON with exact ids and ISO times.

Everything the CLI writes to stdout and stderr while a command runs (its results, its errors, argparse's usage
errors, log lines, ``--debug`` tracebacks) passes through :func:`printable_streams`: a control character in a
file's header, a table name, a comment or a cell value is printed as its escape (``\\x1b``), never as the byte
that would drive the terminal.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from wap_core.config import mask_secrets
from wap_core.exceptions import printable
from wap_core.states import CheckStatus
from wap_core.values import Record, to_jsonable

if TYPE_CHECKING:
    pass

EXIT_OK, EXIT_REFUSED, EXIT_ERROR = 0, 1, 2


class _Printable(io.TextIOBase):
    """A text stream writing to ``stream`` with every control character but tab and line feed escaped
    (:func:`wap_core.exceptions.printable`)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream

    def write(self, s: str) -> int:
        self._stream.write(printable(s))
        return len(s)

    def flush(self) -> None:
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self._stream, "encoding", None) or "utf-8")


def n_rows(n: int) -> str:
    """A row count as people write it: ``1 row``, ``2 rows`` (the CLI's lines; ``--json`` keeps the number)."""
    return f"{n} row" + ("" if n == 1 else "s")


@contextmanager
def printable_streams() -> Iterator[None]:
    """While the block runs, ``sys.stdout`` and ``sys.stderr`` print no control character but tab and line
    feed: the one place every message of the CLI goes through, whoever prints it."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Printable(out), _Printable(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def json_default(value: Any) -> Any:
    """JSON for values json cannot encode (:func:`~wap_core.values.to_jsonable`): decimals as numbers,
    times as ISO 8601, sets as lists, the core's dataclasses and enums."""
    return to_jsonable(value)


def print_json(obj: Any) -> None:
    """``obj`` as indented JSON on stdout (exact ids, ISO times), secrets masked."""
    print(mask_secrets(json.dumps(obj, indent=2, default=json_default)))


def print_result(args: argparse.Namespace, result: Any, line: str) -> int:
    """``result`` as JSON with ``--json``, else ``line``; the exit code of a command that did its work."""
    print_json(to_jsonable(result)) if args.json else print(line)
    return EXIT_OK


def format_cell(value: Any) -> str:
    """A table cell: blank for none, lists joined, mappings as key=value."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(format_cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={format_cell(v)}" for k, v in value.items() if v is not None)
    return str(value)


def print_table(rows: list[Record], cols: Sequence[str]) -> None:
    """``rows`` as a plain text table of ``cols`` (upper-case header, blanks for empty values)."""
    if not rows:
        print("(none)")
        return
    widths = {c: max(len(c), *(len(format_cell(r.get(c))) for r in rows)) for c in cols}
    print("  ".join(c.upper().ljust(widths[c]) for c in cols).rstrip())
    for r in rows:
        print(mask_secrets("  ".join(format_cell(r.get(c)).ljust(widths[c]) for c in cols).rstrip()))


_MARKS = {
    CheckStatus.PASSED: "ok  ",
    CheckStatus.WARNED: "WARN",
    CheckStatus.FAILED: "FAIL",
    CheckStatus.ERROR: "ERR ",
}


def print_audit(res: Any) -> None:
    """An audit's verdict and one line per check."""
    print(
        f"audit of {res.table} {res.branch} at snapshot {res.snapshot_id}: {res.status.upper()} ({n_rows(res.rows_checked)})"
    )
    for c in res.checks:
        mark = _MARKS.get(c.status, str(c.status))
        print(f"  [{mark}] {c.name}: {c.message}")


def print_traceback() -> None:
    """--debug: the traceback of the exception being handled, with secrets masked."""
    print(mask_secrets(traceback.format_exc()), file=sys.stderr, end="")


def print_review(args: argparse.Namespace, rs: Any, verb: str) -> int:
    """A review's state after ``verb`` (approved, changes requested), as JSON with ``--json``."""
    if args.json:
        print_json(to_jsonable(rs))
    else:
        print(
            f"{verb} {rs.table} {rs.branch} at snapshot {rs.head}: review {rs.state.value}, "
            f"{len(rs.approvals)} of {rs.policy.approvals} required approval(s)"
            + (f" ({rs.message})" if rs.message else "")
        )
    return EXIT_OK


def print_batch_review(args: argparse.Namespace, br: Any, verb: str) -> int:
    """A verdict on a whole batch: the heads it binds to and each table's review state (JSON with ``--json``)."""
    if args.json:
        print_json(to_jsonable(br))
    else:
        heads = ", ".join(f"{t}@{h}" for t, h in br.heads.items())
        print(f"{verb} batch {br.batch} at heads {heads}: review {br.state.value}")
        for rs in br.tables:
            print(
                f"  {rs.table}: review {rs.state.value}, {len(rs.approvals)} of {rs.policy.approvals} required"
                " approval(s)" + (f" ({rs.message})" if rs.message else "")
            )
    return EXIT_OK


def print_audit_err(res: Any) -> None:
    """:func:`print_audit` on stderr (the JSON result keeps stdout)."""
    stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        print_audit(res)
    finally:
        sys.stdout = stdout
