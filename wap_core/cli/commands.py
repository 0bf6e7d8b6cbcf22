"""One handler per command: parse the arguments into core calls, print the result, return the exit code."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from wap_core import api
from wap_core.cli.output import (
    EXIT_OK,
    EXIT_REFUSED,
    json_default,
    n_rows,
    print_audit,
    print_audit_err,
    print_batch_review,
    print_json,
    print_result,
    print_review,
    print_table,
)
from wap_core.exceptions import ValidationError
from wap_core.identifiers import TableId
from wap_core.values import to_jsonable

if TYPE_CHECKING:
    from wap_core.api import Context


# A subcommand: (parsed arguments, the context opened once: lakehouse and who acts) -> exit code.
Handler = Callable[[argparse.Namespace, "Context"], int]


def _authorize_read(args: argparse.Namespace, ctx: Context) -> None:
    """Reading commands (tables, branches, history, diff) need the READ permission (on the table, if one is named)."""

    api.authorize_read(ctx, TableId.parse(args.table) if getattr(args, "table", None) else None)


def _whoami(args: argparse.Namespace, ctx: Context) -> int:

    policy = api.access_policy(ctx)
    roles = [r.label for r in policy.roles_of(ctx.user)]
    if args.json:
        print_json({"user": ctx.user, "roles": roles})
    else:
        print(ctx.user)
        print(f"roles: {', '.join(roles) or 'none'}")
        if not policy.enabled:
            print(
                f"access control is off (no access file at {policy.path}): everyone is admin",
                file=sys.stderr,
            )
    return EXIT_OK


def _demo(args: argparse.Namespace, ctx: Context) -> int:

    if args.if_empty and api.table_names(ctx):
        print(f"lakehouse {api.settings(ctx).home} already has tables; demo not seeded")
        return EXIT_OK
    summary = api.seed_demo(ctx, force=args.force)
    for line in summary:
        print(line)
    return EXIT_OK


def _tables(args: argparse.Namespace, ctx: Context) -> int:

    _authorize_read(args, ctx)
    infos = [to_jsonable(t) for t in api.table_infos(ctx)]
    print_json(infos) if args.json else print_table(
        infos, ["table", "rows", "snapshots", "open_branches", "last_updated"]
    )
    return EXIT_OK


def _branches(args: argparse.Namespace, ctx: Context) -> int:

    _authorize_read(args, ctx)
    rows = [to_jsonable(b) for b in api.list_branches(ctx, TableId.parse(args.table) if args.table else None)]
    if args.status:
        rows = [r for r in rows if r["status"] == args.status]
    print_json(rows) if args.json else print_table(
        rows, ["table", "branch", "status", "review", "approvals", "created", "rows_added", "main_moved"]
    )
    return EXIT_OK


def _gc(args: argparse.Namespace, ctx: Context) -> int:

    gc = api.collect_garbage(ctx, older_than=args.older_than, dry_run=args.dry_run)
    return print_result(args, gc, "\n".join(gc.lines()))


def _history(args: argparse.Namespace, ctx: Context) -> int:
    _authorize_read(args, ctx)
    entries = api.history(ctx, str(TableId.parse(args.table)) if args.table else None, limit=args.limit)
    rows = [to_jsonable(e) for e in entries]
    print_json(rows) if args.json else print_table(
        rows, ["at", "user", "action", "table", "branch", "outcome", "reason"]
    )
    return EXIT_OK


def _ingest(args: argparse.Namespace, ctx: Context) -> int:

    table = TableId.parse(args.table)
    # The CLI reads any path its OS user can read: whoever runs it holds the catalog's credentials anyway.
    res = api.ingest(
        ctx,
        table,
        args.sources,
        branch=args.branch,
        batch=args.batch,
        fmt=args.format,
        create=args.create,
        source_policy=api.SourcePolicy.ANY,
        replay_of=args.replay_of,
    )
    if args.json:
        print_json(to_jsonable(res))
    else:
        print(res.branch)
        print(
            f"wrote {n_rows(res.rows_written)} to {res.table} branch {res.branch}"
            + (f" ({res.malformed_rows} malformed rows kept out)" if res.malformed_rows else ""),
            file=sys.stderr,
        )
        for note in res.narrowing:  # the schema check's notes (values that do not fit are malformed)
            print(f"narrowing: {note}", file=sys.stderr)
        if res.replay is not None:
            rp = res.replay
            print(
                f"replay: {rp.replayed} quarantined rows of {rp.replay_of} marked replayed", file=sys.stderr
            )
            for k in rp.keys:
                if k.flagged:
                    print(
                        f"replay: {k.check}: {k.unmatched} keys not among the quarantined rows', "
                        f"{k.missing} quarantined keys missing",
                        file=sys.stderr,
                    )
        if (q := res.quarantine) is not None:  # the checks with on_fail: quarantine
            per = ", ".join(f"{name} {n}" for name, n in q.checks.items())
            print(
                f"{q.policy}: quarantined {q.quarantined} of {q.rows_before} rows into {q.quarantine_table} "
                f"({per}); head {q.old_head} -> {q.new_head}"
                if q.refused is None
                else f"{q.policy} not applied: {q.refused}",
                file=sys.stderr,
            )
        print_audit_err(res.audit)
    return EXIT_OK if res.audit.passed else EXIT_REFUSED


def _branch_or_batch(args: argparse.Namespace) -> tuple[TableId, str] | None:
    """``TABLE BRANCH`` (both) or ``--batch NAME`` (then neither): the branch, or None for the batch."""
    given = [x for x in (args.table, args.branch) if x is not None]
    if args.batch is not None:
        if given:
            raise ValidationError("give TABLE BRANCH or --batch NAME, not both")
        return None
    if len(given) != 2:
        raise ValidationError("give both TABLE and BRANCH (or --batch NAME)")
    return TableId.parse(args.table), args.branch


def _audit(args: argparse.Namespace, ctx: Context) -> int:

    target = _branch_or_batch(args)
    if target is None:
        batch = api.audit_batch(ctx, args.batch)
        if args.json:
            print_json(to_jsonable(batch))
        else:
            print(
                f"audit of batch {batch.batch}: {batch.status.upper()} ({len(batch.tables)} tables; "
                f"audited now: {', '.join(batch.reaudited) or 'none, every audit is current'})"
            )
            for one in batch.tables:
                print_audit(one)
        return EXIT_OK if batch.passed else EXIT_REFUSED
    audit = api.run_audit(ctx, *target)
    print_json(to_jsonable(audit)) if args.json else print_audit(audit)
    return EXIT_OK if audit.passed else EXIT_REFUSED


def _diff(args: argparse.Namespace, ctx: Context) -> int:

    _authorize_read(args, ctx)
    table = TableId.parse(args.table)
    d = api.compute_diff(ctx, table, args.branch)
    keyed = None
    if args.key:
        keyed = api.keyed_diff(ctx, table, args.branch, [k.strip() for k in args.key.split(",") if k.strip()])
    if args.json:
        print_json({**to_jsonable(d), **({"keyed": to_jsonable(keyed)} if keyed is not None else {})})
        return EXIT_OK
    print(
        f"{d.table} {d.branch}: +{d.rows_added} rows, -{d.rows_deleted} rows; main moved: {d.main_moved}; pure append: {d.pure_append}"
    )
    for change in d.schema_changes:
        print(f"  schema: {to_jsonable(change)}")  # the change as its JSON object
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
    print_table(rows, list(rows[0].keys()) if rows else [])
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


def _table_branch_or_batch(args: argparse.Namespace, command: str) -> str | None:
    """The batch a ``publish``/``discard`` names (``--batch NAME``), or None for ``TABLE BRANCH``; exactly one."""
    given = args.table is not None or args.branch is not None
    if args.batch is not None and given:
        raise ValidationError(f"{command}: give TABLE BRANCH or --batch NAME, not both")
    if args.batch is None and (args.table is None or args.branch is None):
        raise ValidationError(f"{command}: give TABLE BRANCH, or --batch NAME for every table of a batch")
    return str(args.batch) if args.batch is not None else None


def _publish(args: argparse.Namespace, ctx: Context) -> int:
    batch = _table_branch_or_batch(args, "publish")
    if batch is not None:
        b = api.publish_batch(ctx, batch, force=args.force, reason=args.reason)
        moves = "; ".join(f"{t.table} main {t.main_before} -> {t.main_after}" for t in b.tables)
        return print_result(
            args,
            b,
            f"{b.outcome}: batch {b.batch} ({len(b.tables)} tables, tag {b.tag}): {moves}"
            + (" (forced)" if b.forced else ""),
        )
    r = api.publish(ctx, TableId.parse(args.table), args.branch, force=args.force, reason=args.reason)
    return print_result(
        args,
        r,
        f"{r.outcome}: {r.table} main {r.main_before} -> {r.main_after}" + (" (forced)" if r.forced else ""),
    )


def _rebase(args: argparse.Namespace, ctx: Context) -> int:
    batch = _table_branch_or_batch(args, "rebase")
    if batch is not None:
        br = api.rebase_batch(ctx, batch)
        moves = "; ".join(f"{t.table} {t.outcome} {t.old_head} -> {t.new_head}" for t in br.tables)
        audit = f"; audit {br.audit.status}" if br.audit is not None else ""
        return print_result(args, br, f"{br.outcome}: batch {br.batch}: {moves}{audit}")
    rb = api.rebase(ctx, TableId.parse(args.table), args.branch)
    return print_result(
        args,
        rb,
        f"{rb.outcome}: {rb.table} {rb.branch} {rb.old_head} -> {rb.new_head}"
        + (
            f"; audit {rb.audit.status}"
            + (f": {', '.join(rb.audit.failed_checks)}" if rb.audit.failed_checks else "")
            if rb.audit is not None
            else ""
        ),
    )


def _quarantine(args: argparse.Namespace, ctx: Context) -> int:
    q = api.quarantine(ctx, TableId.parse(args.table), args.branch, checks=args.check, reason=args.reason)
    per = ", ".join(f"{name} {n}" for name, n in q.checks.items())
    line = (
        f"quarantined {q.quarantined} of {n_rows(q.rows_before)} of {q.table} {q.branch} into {q.quarantine_table} "
        f"({per}); head {q.old_head} -> {q.new_head}"
    )
    if q.audit is not None:
        line += f"; audit {q.audit.status}" + (
            f": {', '.join(q.audit.failed_checks)}" if q.audit.failed_checks else ""
        )
    return print_result(args, q, line)


def _quarantine_export(args: argparse.Namespace, ctx: Context) -> int:
    r = api.export_quarantine(
        ctx, TableId.parse(args.table), fmt=args.fmt, path=args.file, batch=args.batch, check=args.check
    )
    of = f" of batch {r.batch}" if r.batch else ""
    of += f" failing {r.check}" if r.check else ""
    return print_result(
        args, r, f"exported {r.rows} quarantined rows of {r.table}{of} to {r.path} ({r.format})"
    )


def _discard(args: argparse.Namespace, ctx: Context) -> int:
    batch = _table_branch_or_batch(args, "discard")
    if batch is not None:
        b = api.discard_batch(ctx, batch, reason=args.reason)
        gone = "; ".join(f"{t.table} (head {t.head})" for t in b.tables)
        return print_result(args, b, f"discarded batch {b.batch}: {gone}; mains untouched")
    dr = api.discard(ctx, TableId.parse(args.table), args.branch, reason=args.reason)
    return print_result(args, dr, f"discarded {dr.table} {dr.branch} (head {dr.head}); main untouched")


def _approve(args: argparse.Namespace, ctx: Context) -> int:

    target = _branch_or_batch(args)
    if target is None:
        return print_batch_review(args, api.approve_batch(ctx, args.batch, comment=args.comment), "approved")
    rs = api.approve(ctx, *target, comment=args.comment)
    return print_review(args, rs, "approved")


def _request_changes(args: argparse.Namespace, ctx: Context) -> int:

    target = _branch_or_batch(args)
    if target is None:
        br = api.request_changes_batch(ctx, args.batch, comment=args.comment)
        return print_batch_review(args, br, "changes requested on")
    rs = api.request_changes(ctx, *target, comment=args.comment)
    return print_review(args, rs, "changes requested on")


def _comment(args: argparse.Namespace, ctx: Context) -> int:

    added = api.add_comment(ctx, TableId.parse(args.table), args.branch, args.text, check=args.check)
    return print_result(args, added, f"comment {added.id} added to {added.table} {added.branch}")


def _comments(args: argparse.Namespace, ctx: Context) -> int:

    thread = [to_jsonable(c) for c in api.comments(ctx, TableId.parse(args.table), args.branch)]
    print_json(thread) if args.json else print_table(thread, ["at", "user", "kind", "check", "text"])
    return EXIT_OK


def _rollback(args: argparse.Namespace, ctx: Context) -> int:
    if args.batch is not None:
        if args.table is not None or args.to is not None:
            raise ValidationError("rollback: give TABLE --to SNAPSHOT_ID or --batch NAME, not both")
        bb = api.rollback_batch(ctx, args.batch, reason=args.reason)
        moves = "; ".join(f"{t.table} main {t.main_before} -> {t.main_after}" for t in bb.tables)
        return print_result(args, bb, f"rolled back batch {bb.batch} ({len(bb.tables)} tables): {moves}")
    if args.table is None or args.to is None:
        raise ValidationError(
            "rollback: give TABLE --to SNAPSHOT_ID, or --batch NAME for every table of a batch"
        )
    rr = api.rollback(ctx, TableId.parse(args.table), args.to, reason=args.reason)
    return print_result(
        args,
        rr,
        f"rolled back: {rr.table} main {rr.main_before} -> {rr.main_after} ({len(rr.rolled_back)} snapshot(s) rolled back)",
    )


def _reopen(args: argparse.Namespace, ctx: Context) -> int:

    ro = api.reopen(
        ctx,
        TableId.parse(args.table),
        args.snapshot,
        branch=args.branch,
        again=args.again,
        reason=args.reason,
    )
    return print_result(args, ro, ro.branch)


def _branch(args: argparse.Namespace, ctx: Context) -> int:
    """``branch open TABLE [--branch B] [--batch NAME]``: a branch for the user's own Spark job."""
    ob = api.open_branch(ctx, TableId.parse(args.table), branch=args.branch, batch=args.batch)
    how = ", ".join(f"{k}={v}" for k, v in ob.spark_conf.items())
    props = ", ".join(f"'{k}'='{v}'" for k, v in ob.table_properties.items())
    needs = f" (with TBLPROPERTIES ({props}) on the table)" if props else ""
    line = (
        f"{ob.outcome} {ob.table} {ob.branch} at snapshot {ob.head} for {ob.user}"
        + (f" in batch {ob.batch}" if ob.batch else "")
        + (f": {ob.note}" if ob.note else "")
        + f"\nwrite with {how}{needs}, or to {ob.identifier}"
    )
    return print_result(args, ob, line)


def _token(args: argparse.Namespace, ctx: Context) -> int:
    """``token create`` prints the token once (stdout; only its SHA-256 is stored); ``list``, ``revoke``."""
    if args.token_command == "create":
        token, info = api.create_token(ctx, args.user, args.role, args.expires)
        if args.json:  # not print_json: the token is a registered secret and would be masked
            print(json.dumps({**to_jsonable(info), "token": token}, indent=2))
        else:
            print(token)
        print(
            f"service token {info.id} for {info.user} ({info.role}), expires {info.expires_at.isoformat(timespec='seconds')}: "
            "shown once, store it now (pass it as WAP_TOKEN)",
            file=sys.stderr,
        )
    elif args.token_command == "list":
        rows = [to_jsonable(t) for t in api.list_tokens(ctx)]
        print_json(rows) if args.json else print_table(
            rows, ["id", "user", "role", "status", "expires_at", "created_by", "revoked_by"]
        )
    else:
        info = api.revoke_token(ctx, args.id)
        print_json(to_jsonable(info)) if args.json else print(
            f"revoked service token {info.id} ({info.user})"
        )
    return EXIT_OK


def _notify_test(args: argparse.Namespace, ctx: Context) -> int:
    """``notify-test``: exit 0 when every target took the test event, 1 when one did not, 2 on a bad notify file."""

    cfg, outcomes = api.notify_test(ctx)
    if args.json:
        print_json([to_jsonable(o) for o in outcomes])
    elif not outcomes:
        print(
            f"no notification targets: {cfg.path} "
            + ("lists no webhooks" if cfg.exists else "does not exist"),
            file=sys.stderr,
        )
    else:
        rows = [
            {
                **to_jsonable(o),
                "outcome": "delivered" if o.delivered else "FAILED",
                "status": o.status if o.status is not None else "-",
                "error": o.error or "",
            }
            for o in outcomes
        ]
        print_table(rows, ["target", "format", "source", "outcome", "status", "attempts", "error"])
    return EXIT_OK if all(o.delivered for o in outcomes) else EXIT_REFUSED


def _query(args: argparse.Namespace, ctx: Context) -> int:
    """``query``: one read-only query over ``ref_view`` (see wap_core.security.sql_guard); refusals are exit 2."""

    table = TableId.parse(args.table)

    if not 1 <= args.limit <= api.MAX_ROWS:
        raise ValidationError(f"--limit must be between 1 and {api.MAX_ROWS}, got {args.limit}")
    ref = api.resolve_any_ref(api.table(ctx, table), table, args.ref)
    res = api.bounded_query_rows(ctx, table, ref.snapshot_id, args.sql, limit=args.limit)
    if args.json:
        print(json.dumps(res.json_rows(), indent=2, default=json_default))
    else:
        cells = [[str(c) for c in res.columns]] + [
            ["" if v is None else str(api.json_value(v)) for v in r]  # a NULL prints blank (README)
            for r in res.rows
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
            f"note: more rows exist; showing the first {len(res.rows)} (raise --limit, at most {api.MAX_ROWS})",
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
    "quarantine": _quarantine,
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
    "branch": _branch,
}


"""One handler per subcommand of :func:`build_parser` (the same names)."""

# Commands that are a word under another command (parsed by their own parser: cli.parser.parse_args).
SUBCOMMANDS: dict[str, Handler] = {"quarantine export": _quarantine_export}
