"""The Review of a batch that spans tables: /review?batch=NAME (``pages/review.py`` hands over to :func:`render`).

Order, as the one-branch Review's: the evidence first: the batch's verdict (its worst table's) and a line per
table, then the cross-table checks (the checks that read another table, e.g. ``references``: they decide
whether the tables belong together), then the batch's readiness (every table's publish check, the batch's
message), what a publish guarantees on this catalog (atomic: yes / only against failures, not crashes) and
the batch's actions (Re-run audit, Publish, Discard, Rebase when a main moved, Force), its review (approvals and requests for changes bound
to every table's head, Approve batch, Request changes); then each table: its verdict, its other failing checks with their rows, what its branch
changes (metadata), every check of its audit; last, each table's diff against main (Spark). The parts are the
one-branch Review's (:mod:`pages._review_parts`), per table. A batch that is no longer open but was published
shows its newest publish (every table's main before and after it, and now) and **Roll back batch** (admin).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import streamlit as st

from pages import _actions as ra
from pages import _common as ui
from pages import _quarantine_parts as qp
from pages import _review_parts as rv
from pages import _workflow as wf
from wap_core import api
from wap_core.api import (
    AuditResult,
    Batch,
    BatchAuditResult,
    BatchDiscardResult,
    BatchPublishResult,
    BatchReadiness,
    BatchRebaseResult,
    BatchRollbackResult,
    BatchRollbackState,
    CheckGuide,
    Context,
    MetadataDiff,
    Permission,
    PublishCheck,
    ReviewState,
    ReviewStatus,
)
from wap_core.exceptions import ValidationError, WapError
from wap_core.identifiers import TableId, validate_branch
from wap_core.states import BranchStatus, RebaseOutcome, branch_status, worst_branch_status

CLOSED = "batch_review_closed"  # the batch this session just published or discarded
DIALOG = "batch_review_dialog"  # the open dialog: {"kind": "publish" | "discard" | "approve" | "changes" | "rollback", "batch": NAME, ...}


@dataclass(frozen=True)
class _Part:
    """One table of the batch as the Review reads it (metadata and the journal: no Spark)."""

    table: TableId
    head: int
    audit: AuditResult | None
    meta: MetadataDiff
    guides: dict[str, CheckGuide]
    check: PublishCheck

    @property
    def status(self) -> BranchStatus:
        return branch_status(self.head, self.audit)


def _guides(ctx: Context, table: TableId) -> dict[str, CheckGuide]:
    try:  # the checks file's word on each check (the table that fixes it: a cross-table check)
        return api.check_guides(ctx, table)
    except WapError as exc:
        ui.show_error(exc)
        return {}


def _not_open(ctx: Context, name: str) -> None:
    """A name that is no open batch: its newest publish with Roll back batch when it was published; else one
    line, and the way back (no line after this session's own publish or discard: its success message says
    it all)."""
    closed = ui.take(CLOSED) == name
    try:
        state = api.batch_rollback_state(ctx, name)
    except WapError as exc:
        ui.show_error(exc)
        return
    if state is not None:
        _published_batch(ctx, name, state)
        return
    if closed:
        return
    past = api.history(ctx, branch=name, limit=200)  # what ended it, as the one-branch Review says
    st.warning(f"No open batch {ui.md(repr(name))}: {wf.how_it_ended(past)}.")
    st.page_link("pages/branches.py", label="Open branches and batches", icon=":material/account_tree:")


def render(ctx: Context, name_q: str) -> None:
    """The batch's Review (``name_q``: the ``?batch=`` parameter, validated here)."""
    try:
        name = validate_branch(name_q)
    except ValidationError as exc:
        ui.show_error(exc)
        st.page_link("pages/branches.py", label="Open branches and batches", icon=":material/account_tree:")
        return
    batch = api.find_batch(ctx, name)
    if batch is None:
        st.subheader(f"Batch {ui.md(name)}")
        _not_open(ctx, name)
        return
    ready = api.batch_readiness(ctx, name)
    checks = {t.table: t.check for t in ready.tables}
    parts = []
    for bt in batch.tables:
        tbl = api.table(ctx, bt.table)
        parts.append(
            _Part(
                bt.table,
                bt.head,
                api.latest_audit(ctx, bt.table, name),
                api.metadata_diff(tbl, bt.table, name),
                _guides(ctx, bt.table),
                checks[str(bt.table)],
            )
        )
    st.subheader(
        f"Batch {ui.md(name)} · {len(parts)} table{'s' if len(parts) != 1 else ''}: "
        f"{ui.md(', '.join(str(p.table) for p in parts))}"
    )
    _verdict(parts)
    _cross_table(name, parts)
    _readiness(ready, ui.may(ctx, Permission.PUBLISH).allowed)
    _actions(ctx, name, ready, parts)
    _review(ctx, batch)
    for p in parts:
        _table(ctx, name, p)
    if ui.dialog_open():  # its Confirm is taken at once (ui.dialog_open); the diffs come back when it closes
        st.markdown("### Diffs against main (Spark)")
        st.caption("The diffs are computed once the dialog is closed.")
        return
    _diffs(ctx, name, parts)


# ----------------------------------------------------------------------------- the evidence
def _verdict(parts: list[_Part]) -> None:
    """The batch's status (its worst table's) in one box, then a line per table."""
    worst = worst_branch_status(p.status for p in parts)
    bad = [p for p in parts if p.status is worst]
    names = ", ".join(f"**{ui.md(p.table)}**" for p in bad)
    icon = ui.STATUS_MATERIAL[worst]
    n = f"{len(bad)} of {len(parts)} tables"
    # audits that passed on their own heads but read another table of the batch at an older head: not green
    stale = [
        p for p in parts if p.check.code == "stale" and p.status in (BranchStatus.PASSED, BranchStatus.WARNED)
    ]
    if stale:
        st.warning(
            f"**Audits to run again — {len(stale)} of {len(parts)} tables:** "
            + ", ".join(f"**{ui.md(p.table)}**" for p in stale)
            + ": their checks read another table of the batch at an older head (**Re-run audit**)",
            icon=":material/update:",
        )
    elif worst is BranchStatus.PASSED:
        st.success(f"**Every table's audit passed** ({len(parts)} tables).", icon=icon)
    elif worst is BranchStatus.WARNED:
        st.warning(f"**Audits passed with warnings** on {n}: {names}", icon=icon)
    elif worst is BranchStatus.FAILED:
        st.error(f"**Batch audit failed — {n} failed:** {names}", icon=icon)
    else:
        st.warning(
            f"**Batch not audited at its heads — {n} {ui.md(worst.value.replace('_', ' '))}:** {names}",
            icon=icon,
        )
    rows = [
        {
            "review": ui.review_url(str(p.table), p.meta.branch),
            "table": str(p.table),
            "status": ui.status_badge(p.status.value),
            "failed checks": ", ".join(p.audit.failed_checks) if p.audit else "",
            "rows added": p.meta.rows_added,
            "main moved": p.meta.main_moved,
            "may publish": p.check.allowed,
            "why not": "" if p.check.allowed else p.check.message,
            "head_snapshot_id": p.head,
        }
        for p in parts
    ]
    ui.grid(
        ui.style_status(ui.frame(rows), "status"),
        column_config={
            "review": st.column_config.LinkColumn(
                "review",
                display_text="Table ↗",
                help="This table's branch on its own (approve, re-run, rebase)",
            ),
            "rows added": ui.count_column("rows added"),
            "main moved": st.column_config.CheckboxColumn("main moved"),
            "may publish": st.column_config.CheckboxColumn("may publish"),
            "why not": st.column_config.TextColumn("why not", width="large"),
            "head_snapshot_id": st.column_config.TextColumn("head"),
        },
    )


def _cross_table(name: str, parts: list[_Part]) -> None:
    """The checks that read another table, of every table, first: failing ones with their rows."""
    cross = [
        (p, c) for p in parts if p.audit is not None for c in p.audit.checks if rv.cross_table(c, p.guides)
    ]
    st.markdown("#### Cross-table checks")
    if not cross:
        st.caption("No table of this batch has a check that reads another table.")
        return
    st.caption(
        "The checks that read another table (e.g. `references`): whether the batch's tables fit together."
    )
    for p, c in cross:
        if c.status.ok:
            st.markdown(
                f"{ui.STATUS_MATERIAL[c.status.value]} **{ui.md(c.name)}** on {ui.md(p.table, code=True)}: "
                f"{ui.md(c.status.value)}" + (f" · {ui.md(c.message)}" if c.message else "")
            )
    for p in parts:
        if p.audit is not None and any(
            not c.status.ok and rv.cross_table(c, p.guides) for c in p.audit.checks
        ):
            st.markdown(f"**{ui.md(p.table)}**")
            rv.failing_checks(
                p.audit,
                str(p.table),
                name,
                p.guides,
                only=partial(rv.cross_table, guides=p.guides),
                heading=None,
                batch=name,
            )


def _readiness(ready: BatchReadiness, may_publish: bool) -> None:
    """Every table's publish check, the batch's message, and what a publish guarantees on this catalog (no
    green "ready" for who may not publish)."""
    st.markdown("#### Publish the batch")
    if ready.allowed and may_publish:
        st.success(f"Ready to publish every table together: {ui.md(ready.message)}")
    elif ready.allowed:
        st.info(
            f"Publishable by an approver, every table together: {ui.md(ready.message)}",
            icon=":material/lock:",
        )
    else:
        st.warning(f"**Publish is disabled:** {ui.md(ready.message)}")
    # only this catalog's guarantee, said once: the label, then what it means
    st.info(
        f"Atomic on this catalog: **{ui.md(ready.atomicity.label)}**: {ui.md(ready.atomicity.meaning)}",
        icon=":material/lock:" if ready.atomicity.label == "yes" else ":material/warning:",
    )


# ----------------------------------------------------------------------------- the batch's actions
def _close() -> None:
    st.session_state.pop(DIALOG, None)


def _actions(ctx: Context, name: str, ready: BatchReadiness, parts: list[_Part]) -> None:
    """Publish (every table or none) and Discard of the batch, role-gated (disabled with the core's reason; the
    core refuses anyway); Rebase when a table's main moved since its fork; Force with a reason for admins when
    every refusal may be overridden. Publish, Discard and Force ask for Confirm in a dialog (a form: one submit
    carries the text and the click); Rebase runs at once, as the one-branch Review's."""
    can = ra.gate(ctx)
    moved = [p for p in parts if p.meta.main_moved]
    a0, a1, a2, *a3 = st.columns(4 if moved else 3)
    rerun_audit = ra.button(
        a0,
        "Re-run audit",
        can[Permission.AUDIT],
        icon=":material/replay:",
        help="Audit again every table whose audit is stale (its head, or a table its checks read, moved)",
        key="batch_rerun_audit",
    )
    if ra.button(
        a1,
        "Publish batch",
        can[Permission.PUBLISH],
        icon=":material/publish:",
        primary=True,
        ready=ready.allowed,
        help=ui.md(ready.message)
        if not ready.allowed
        else "Fast-forward every table's main to its branch, all or none",
    ):
        st.session_state[DIALOG] = {"kind": "publish", "batch": name, "force": False}
    if ra.button(
        a2,
        "Discard batch",
        can[Permission.DISCARD],
        icon=":material/delete:",
        help="Drop every table's branch of the batch; every main is untouched",
    ):
        st.session_state[DIALOG] = {"kind": "discard", "batch": name}
    rebase = bool(a3) and ra.button(
        a3[0],
        "Rebase batch",
        can[Permission.REBASE],
        icon=":material/merge:",
        help=f"Replay the batch onto the current main of {ui.md(', '.join(str(p.table) for p in moved))} (every "
        "table's branch swapped in one commit, or none), then audit the batch again",
        key="batch_rebase",
    )
    can.locks(rebase=bool(moved))
    if rerun_audit:
        _rerun_audit(ctx, name)
    if rebase:
        _rebase(ctx, name)
    if (
        not ready.allowed
        and ready.forceable
        and can.force_publish(
            expander="Force publish the batch (admins only, journaled with your reason)",
            caption="A forced publish overrides every refusal above. It needs a reason, which is recorded in the "
            "journal with your name, for every table.",
            label="Force publish batch",
            help="Publish every table over the refusals, with a reason",
        )
    ):
        st.session_state[DIALOG] = {"kind": "publish", "batch": name, "force": True}
    dialog = st.session_state.get(DIALOG)
    if dialog and dialog.get("batch") == name:
        if dialog["kind"] == "publish":
            _publish_dialog(ctx, name, ready, parts, bool(dialog.get("force")))
        elif dialog["kind"] == "discard":
            _discard_dialog(ctx, name, parts)


def _rerun_audit(ctx: Context, name: str) -> None:
    """Re-audit the batch's stale tables (the core decides which), inside a status naming them; one message."""
    try:
        with st.status(
            f"Re-auditing the stale tables of batch {ui.md(name)} with Spark…", expanded=True
        ) as s:
            st.write(
                "Auditing every table whose head, or the head of a table its checks read, moved since its audit…"
            )
            res = api.audit_batch(ctx, name)
            s.update(label=_audited_label(res), state="complete")
    except WapError as exc:
        ui.show_error(exc)
        return
    ui.writes_done()
    ui.flash(*_audited(ctx.user, res))
    st.rerun()


def _rebase(ctx: Context, name: str) -> None:
    """Rebase the batch (the core replays every table whose main moved, swaps every branch in one commit, then
    re-audits the batch's stale tables), inside a status; one message."""
    try:
        with st.status(
            f"Rebasing batch {ui.md(name)} onto its tables' mains with Spark…", expanded=True
        ) as s:
            st.write("Replaying each moved table's rows onto its main, then auditing the batch again…")
            res = api.rebase_batch(ctx, name)
            s.update(label=f"Rebase of batch {ui.md(name)}: {ui.md(res.outcome)}", state="complete")
    except WapError as exc:
        ui.show_error(exc)
        return
    ui.writes_done()
    ui.flash(*_rebased(res))
    st.rerun()


def _rebased(res: BatchRebaseResult) -> tuple[str, str]:
    """The one message of a batch's rebase: each table replayed (rows) or up to date, and the batch's audit."""
    if res.audit is None:
        return (
            "info",
            f"Batch {ui.md(res.batch)} is already on every table's current main: nothing to rebase.",
        )
    tables = ", ".join(
        f"{ui.md(t.table)} ({ui.n_rows(t.rows)} replayed)"
        if t.outcome is RebaseOutcome.REBASED
        else f"{ui.md(t.table)} (up to date)"
        for t in res.tables
    )
    audit = res.audit
    if audit.passed:
        return (
            "success",
            f"Rebased batch {ui.md(res.batch)}: {tables}; audited again: batch {ui.md(audit.status)}.",
        )
    return (
        "warning",
        f"Rebased batch {ui.md(res.batch)}: {tables}; audited again: batch {ui.md(audit.status)}; see the verdict below.",
    )


def _audited_label(res: BatchAuditResult) -> str:
    if not res.reaudited:
        return f"No stale audit: nothing re-run (batch {ui.md(res.status)})"
    return f"Re-audited {ui.md(', '.join(res.reaudited))}: batch {ui.md(res.status)}"


def _audited(user: str, res: BatchAuditResult) -> tuple[str, str]:
    """The one message of a batch's re-run: which tables were audited now, with their status."""
    if not res.reaudited:
        return (
            "info",
            f"Nothing to re-run in batch {ui.md(res.batch)}: every table's audit is at its head "
            f"(batch {ui.md(res.status)}).",
        )
    ran = ", ".join(
        f"{ui.md(t)} ({ui.md(a.status) if (a := res.table(t)) is not None else 'no audit'})"
        for t in res.reaudited
    )
    return (
        "success" if res.passed else "warning",
        f"Batch {ui.md(res.batch)} re-audited by {ui.md(user)}: {ran}; the other tables' audits stand. "
        f"Batch {ui.md(res.status)}.",
    )


def _act(name: str, action: Callable[[], Any], message: Callable[[Any], str]) -> None:
    """Run a confirmed write of the batch (it is closed after it); on success close the dialog, clear the caches
    and report once (no "no open batch" line under it); else show the error in the dialog."""
    ra.confirmed(action, message, close=_close, closed=(CLOSED, name))


def _next(parts: list[_Part]) -> str:
    """Links to each table's History and to Overview (validated names: safe in the URL)."""
    return " · ".join(
        [*(f"[History of {ui.md(p.table)}](/history?table={p.table})" for p in parts), "[Overview](/)"]
    )


def _published(res: BatchPublishResult, parts: list[_Part]) -> str:
    moved = ", ".join(f"{ui.md(t.table)} → {ui.id_text(t.main_after)}" for t in res.tables)
    verb = "Force-published" if res.forced else "Published"
    tag = f"; every table is tagged {ui.md(res.tag, code=True)}" if res.tag else ""
    return f"{verb} batch {ui.md(res.batch)}: every main moved together ({moved}){tag}. {_next(parts)}"


def _discarded(res: BatchDiscardResult, parts: list[_Part]) -> str:
    tables = ", ".join(ui.md(t.table) for t in res.tables)
    why = f" ({ui.md(res.reason)})" if res.reason else ""
    return f"Discarded batch {ui.md(res.batch)}{why}: the branches of {tables} are dropped; every main is unchanged. {_next(parts)}"


@ui.dialog("Publish the batch", on_dismiss=_close)
def _publish_dialog(ctx: Context, name: str, ready: BatchReadiness, parts: list[_Part], force: bool) -> None:
    tables = ", ".join(f"{ui.md(p.table, code=True)} ({ui.n_rows(p.meta.rows_added)} added)" for p in parts)
    reason = wf.publish_reason(
        force,
        key="batch_",
        forced=f"Force publish batch {ui.md(name)}: {ui.md(ready.message)}",
        plain=f"Fast-forward **main** of every table of batch {ui.md(name, code=True)} to its branch, all or none: "
        f"{tables}. Atomic on this catalog: **{ui.md(ready.atomicity.label)}**.",
        placeholder="Why is publishing despite the refusals acceptable?",
        cancel=_close,
    )
    if reason is not None:
        _act(
            name,
            lambda: api.publish_batch(ctx, name, force=force, reason=reason or None),
            lambda res: _published(res, parts),
        )


@ui.dialog("Discard the batch", on_dismiss=_close)
def _discard_dialog(ctx: Context, name: str, parts: list[_Part]) -> None:
    st.write(
        f"Drop the branch {ui.md(name, code=True)} of every table of the batch "
        f"({ui.md(', '.join(str(p.table) for p in parts))}). No main is touched; the batch's rows will no longer "
        "be published."
    )
    reason = wf.discard_reason(
        "batch_discard_reason", placeholder="e.g. the airports file was incomplete", cancel=_close
    )
    if reason is not None:
        _act(name, lambda: api.discard_batch(ctx, name, reason=reason), lambda res: _discarded(res, parts))


# ----------------------------------------------------------------------------- a published batch
def _published_batch(ctx: Context, name: str, state: BatchRollbackState) -> None:
    """A batch that is no longer open but was published: its newest publish (every table's main before it,
    after it and now) and Roll back batch (admin, a reason required, confirmed in a dialog; disabled with the
    core's reason when the rollback would be refused or the role may not)."""
    pub = state.published
    st.markdown("#### Published batch")
    st.info(
        f"Batch {ui.md(name, code=True)} was published by {ui.md(pub.user)} at {ui.md(ui.short_time(pub.at))}: "
        f"{ui.md(', '.join(pub.mains))}, every main moved together."
    )
    now = dict(state.mains)
    ui.grid(
        ui.frame(
            [
                {
                    "table": t,
                    "main before the publish": ui.id_text(before),
                    "published head": ui.id_text(after),
                    "main now": ui.id_text(now.get(t)),
                    "history": f"/history?table={t}",
                }
                for t, (before, after) in pub.mains.items()
            ]
        ),
        column_config={
            "history": st.column_config.LinkColumn("history", display_text="History ↗"),
        },
    )
    admin = ui.may(ctx, Permission.ADMIN)
    if st.button(
        "Roll back batch",
        icon=":material/undo:",
        disabled=not (admin.allowed and state.allowed),
        help=ui.md(
            admin.message
            if not admin.allowed
            else "Move every table of this batch back to its main before the publish, all or none"
            if state.allowed
            else state.message
        ),
        key="batch_rollback",
    ):
        st.session_state[DIALOG] = {"kind": "rollback", "batch": name}
    if not admin.allowed:
        st.caption(f":material/lock: {ui.md(admin.message.replace('run admin actions', 'roll back'))}")
    elif state.rolled_back:
        st.caption(
            ":material/undo: Rolled back: every main is where it was before the batch's publish. Each table's "
            "batch can be reopened as a branch from its History."
        )
    elif not state.allowed:
        st.caption(f":material/block: {ui.md(state.message)}")
    dialog = st.session_state.get(DIALOG)
    if dialog and dialog.get("batch") == name and dialog["kind"] == "rollback":
        _rollback_dialog(ctx, name, state)


def _rolled_back(res: BatchRollbackResult) -> str:
    moved = ", ".join(
        f"{ui.md(t.table)} {ui.id_text(t.main_before)} → {ui.id_text(t.main_after)}" for t in res.tables
    )
    links = " · ".join(f"[History of {ui.md(t.table)}](/history?table={t.table})" for t in res.tables)
    return (
        f"Rolled back batch {ui.md(res.batch)}: every main moved back together ({moved}): {ui.md(res.reason)}. "
        f"Each table's batch can be reopened as a branch from its History. {links}"
    )


@ui.dialog("Roll back the batch", on_dismiss=_close)
def _rollback_dialog(ctx: Context, name: str, state: BatchRollbackState) -> None:
    moves = ", ".join(
        f"{ui.md(t, code=True)} {ui.id_text(after)} → {ui.id_text(before)}"
        for t, (before, after) in state.published.mains.items()
    )
    st.warning(
        f"Move **main** of every table of batch {ui.md(name, code=True)} back to where it was before the batch's "
        f"publish, all or none: {moves}. Metadata only; the batch tag stays."
    )
    reason = wf.text_form(
        "batch_rollback_reason",
        "Reason",
        submit="Roll back",
        required="A rollback needs a reason: it is recorded in the journal.",
        placeholder="e.g. the airports file was wrong",
        cancel=_close,
    )
    if reason is not None:
        ra.confirmed(lambda: api.rollback_batch(ctx, name, reason=reason), _rolled_back, close=_close)


# ----------------------------------------------------------------------------- the batch's review
_REVIEW_LABEL = {
    ReviewState.NONE: "No review needed",
    ReviewState.AWAITING: "Awaiting approval",
    ReviewState.APPROVED: "Approved",
    ReviewState.CHANGES_REQUESTED: "Changes requested",
}
# the batch's review state: the worst of its tables' (as the Branches row's, BatchRow.review)
_REVIEW_ORDER = (
    ReviewState.CHANGES_REQUESTED,
    ReviewState.AWAITING,
    ReviewState.APPROVED,
    ReviewState.NONE,
)


def _approve_decision(ctx: Context, batch: Batch) -> tuple[bool, str]:
    """The core's word on approving the batch: allowed only when who acts may approve every table (the role,
    and ``author_cannot_approve`` counting every author of every table); else the first table's reason."""
    for table in batch.table_ids:
        allowed, why = api.approve_decision(ctx, table, batch.name)
        if not allowed:
            return False, why
    return True, ""


def _review(ctx: Context, batch: Batch) -> None:
    """The batch's review: each table's approvals and requests for changes (bound to the set of the batch's
    heads: a new commit on any table dismisses them), then Approve batch / Request changes, role-gated."""
    name = batch.name
    st.markdown("#### Review of the batch")
    try:
        states = [api.review_state(ctx, t, name) for t in batch.table_ids]
    except WapError as exc:
        ui.show_error(exc)
        return
    _review_lines(batch, states)
    allowed, why = _approve_decision(ctx, batch)
    d = ui.may(ctx, Permission.APPROVE)
    c1, c2 = st.columns(2)
    if ra.button(
        c1,
        "Approve batch",
        (allowed, why),
        icon=":material/thumb_up:",
        help="Approve every table at its current head, as one review",
        key="batch_approve",
    ):
        st.session_state[DIALOG] = {"kind": "approve", "batch": name}
    if ra.button(
        c2,
        "Request changes",
        d,
        icon=":material/rate_review:",
        help="Block the batch's publish until you approve it",
        key="batch_changes",
    ):
        st.session_state[DIALOG] = {"kind": "changes", "batch": name}
    ra.locks([(allowed, why), d])
    dialog = st.session_state.get(DIALOG)
    if dialog and dialog.get("batch") == name:
        if dialog["kind"] == "approve":
            _approve_dialog(ctx, batch)
        elif dialog["kind"] == "changes":
            _changes_dialog(ctx, batch)


def _heads_text(batch: Batch) -> str:
    return ", ".join(f"{ui.md(t.table)} at {t.head}" for t in batch.tables)


def _review_lines(batch: Batch, states: list[ReviewStatus]) -> None:
    """The batch's state (its worst table's), a line per table, and the reviews not counted or dismissed."""
    worst = next(s for s in _REVIEW_ORDER if s in {r.state for r in states})
    box = {
        ReviewState.APPROVED: st.success,
        ReviewState.CHANGES_REQUESTED: st.error,
        ReviewState.AWAITING: st.warning,
    }.get(worst, st.info)
    box(f"**{_REVIEW_LABEL[worst]}** (the batch: its least advanced table's review)")
    for rs in states:
        line = (
            f"**{ui.md(rs.table)}**: {_REVIEW_LABEL[rs.state]} · {len(rs.approvals)} of {rs.required} "
            "required approval(s)"
        )
        if rs.approvals:
            line += f" · approved by {ui.md(', '.join(rs.approved_by))}"
        for r in rs.changes_requested:
            line += f" · changes requested by {ui.md(r.user)}" + (
                f": {ui.md(r.comment)}" if r.comment else ""
            )
        st.markdown(line)
    st.caption(
        f"Reviews count for this set of heads only ({_heads_text(batch)}): a new commit on any table of the "
        "batch dismisses them, on every table."
    )
    ignored = dict.fromkeys(r.user for rs in states for r in rs.ignored)
    for user in ignored:
        st.caption(f"Not counted: {ui.md(user)} is an author of a table of this batch.")
    dismissed = dict.fromkeys((r.user, r.verdict.value) for rs in states for r in rs.dismissed)
    for user, verdict in dismissed:
        st.caption(
            f":material/history: Dismissed: {ui.md(user)}'s review ({ui.md(verdict.replace('_', ' '))}) of "
            "earlier heads: a table of the batch moved since (a new commit or a rebase)."
        )


@ui.dialog("Approve the batch", on_dismiss=_close)
def _approve_dialog(ctx: Context, batch: Batch) -> None:
    st.write(
        f"Approve batch {ui.md(batch.name, code=True)} as {ui.md(ctx.user)}: one approval on every table, "
        f"bound to these heads: {_heads_text(batch)}. A new commit on any table dismisses it."
    )
    comment = wf.text_form("batch_approve_comment", "Comment (optional)", submit="Confirm", cancel=_close)
    if comment is not None:  # a recorded review of the batch: the batch stays open
        ra.confirmed(
            lambda: api.approve_batch(ctx, batch.name, comment=comment or None),
            lambda res: (
                f"Approved batch {ui.md(res.batch)} on every table's head ({ui.md(', '.join(res.heads))}): "
                f"review {ui.md(_REVIEW_LABEL[res.state].lower())}."
            ),
            close=_close,
        )


@ui.dialog("Request changes on the batch", on_dismiss=_close)
def _changes_dialog(ctx: Context, batch: Batch) -> None:
    st.write(
        f"Request changes on batch {ui.md(batch.name, code=True)} (every table, at {_heads_text(batch)}): its "
        "publish is blocked until you approve it."
    )
    comment = wf.changes_comment("batch_changes_comment", submit="Confirm", cancel=_close)
    if comment is not None:
        ra.confirmed(
            lambda: api.request_changes_batch(ctx, batch.name, comment=comment),
            lambda res: (
                f"Changes requested on batch {ui.md(res.batch)} ({ui.md(', '.join(res.heads))}): "
                f"{ui.md(comment)}. Its publish is blocked until you approve it."
            ),
            close=_close,
        )


def _table(ctx: Context, name: str, p: _Part) -> None:
    """One table of the batch: its verdict, its other failing checks, its quarantines (and the Quarantine
    dialog), what it changes, every check."""
    st.markdown(f"### {ui.md(p.table)}")
    st.page_link(
        "pages/review.py",
        label=f"Review {ui.md(p.table)} · {ui.md(name)} on its own (approve, re-run the audit, rebase)",
        icon=":material/rate_review:",
        query_params={"table": str(p.table), "branch": name},
    )
    rv.verdict(p.audit, p.head, p.check, p.meta)
    rv.failing_checks(
        p.audit,
        str(p.table),
        name,
        p.guides,
        only=lambda c: not rv.cross_table(c, p.guides),
        heading=f"Failing checks of {ui.md(p.table)}",
        batch=name,
    )
    qp.section(ctx, p.table, name, p.audit, p.head, p.guides)
    st.markdown(f"#### What {ui.md(p.table)}'s branch changes (metadata)")
    rv.metadata_summary(p.meta)
    rv.audit_details(p.audit, p.head)


def _diffs(ctx: Context, name: str, parts: list[_Part]) -> None:
    """Each table's diff against main (Spark), after every table's evidence (which needs no Spark)."""
    st.markdown("### Diffs against main (Spark)")
    if not ui.wait_for_spark(ctx):
        return
    for p in parts:
        st.markdown(f"#### {ui.md(p.table)}: diff against main")
        try:
            with st.status(f"Computing the diff of {ui.md(p.table)} with Spark…", expanded=False) as s:
                diff = rv.cached_diff(str(p.table), name, p.head, _user=ctx.user)
                s.update(label=f"Diff computed on {diff.rows_added:,} new rows", state="complete")
        except WapError as exc:
            ui.show_error(exc)
            continue
        rv.diff_details(diff, checks=p.audit.checks if p.audit else ())
