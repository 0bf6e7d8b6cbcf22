"""Render helpers of the review workflow (approvals, comments, rollback, reopen), called from the pages with one line each.

Thin: read state from wap_core, render, call wap_core on a submitted form. Every user-supplied
text (users, comments, reasons, branch names) goes through ``ui.md`` before any Markdown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

from pages import _actions as ra
from pages import _common as ui
from wap_core import api
from wap_core.api import CommentKind, Context, Decision, Permission, ReviewState, ReviewStatus
from wap_core.exceptions import WapError
from wap_core.identifiers import TableId

if TYPE_CHECKING:
    from wap_core.api import BatchRow, BranchInfo, JournalEntry, TimelineSnapshot

_DIALOG = "workflow_dialog"


def _close() -> None:
    st.session_state.pop(_DIALOG, None)


def text_form(
    key: str,
    label: str,
    *,
    submit: str,
    required: str | None = None,
    placeholder: str | None = None,
    cancel: Callable[[], None] | None = None,
) -> str | None:
    """The body of every dialog that takes text: one form (a text box and its submit button), then Cancel.

    One submit carries the text and the click: Enter in the box submits, and so do Tab then Enter on
    the focused button, or a click. ``required`` (the message shown when the text is empty) makes the
    box required: the browser refuses to submit the form and marks the box until a text is given, and
    the server checks again (the browser's check can be bypassed). Returns the stripped text once the
    form is submitted with an acceptable text, else None. The box's widget key is ``key``.
    """
    with st.form(f"{key}_form", border=False):  # enter_to_submit: Enter in the box submits the form
        text = st.text_input(label, key=key, required=required is not None, placeholder=placeholder)
        submitted = st.form_submit_button(submit, type="primary", width="stretch")
    # Cancel is no submit button of the form: a required box would block it, and Cancel sends no text.
    if cancel is not None and st.button("Cancel", key=f"{key}_cancel", width="stretch"):
        cancel()
        st.rerun()
    if not submitted:
        return None
    text = (text or "").strip()
    if required is not None and not text:
        st.error(required)
        return None
    return text


def publish_reason(
    force: bool, *, key: str, forced: str, plain: str, placeholder: str, cancel: Callable[[], None]
) -> str | None:
    """The body of a Publish dialog (a branch's, a batch's): forced, the warning ``forced`` and a required
    reason; else ``plain`` and an optional note. The boxes' keys: ``{key}force_reason``, ``{key}publish_note``.
    The text once submitted, else None."""
    if force:
        st.warning(forced)
        return text_form(
            f"{key}force_reason",
            "Reason",
            submit="Confirm",
            required="A forced publish needs a reason.",
            placeholder=placeholder,
            cancel=cancel,
        )
    st.write(plain)
    return text_form(f"{key}publish_note", "Note (optional)", submit="Confirm", cancel=cancel)


def discard_reason(key: str, *, placeholder: str, cancel: Callable[[], None]) -> str | None:
    """The body of a Discard dialog (a branch's, a batch's): a required reason; the text once submitted."""
    return text_form(
        key,
        "Reason",
        submit="Confirm",
        required="Discarding needs a reason: it is recorded in the journal.",
        placeholder=placeholder,
        cancel=cancel,
    )


def changes_comment(key: str, *, submit: str, cancel: Callable[[], None]) -> str | None:
    """The body of a Request changes dialog (a branch's, a batch's): what must change, required; the text once
    submitted."""
    return text_form(key, "What must change", submit=submit, required="Say what must change.", cancel=cancel)


# --------------------------------------------------------------------------- Review page


def _review_state_lines(rs: ReviewStatus) -> None:
    """The policy, the state of the head, and who approved, asked for changes, was not counted or dismissed."""
    pol = rs.policy
    rules = [f"{pol.approvals} approval{'s' if pol.approvals != 1 else ''} required"]
    if pol.author_cannot_approve:
        rules.append("no author of the batch may approve")
    if pol.force_needs_second_admin:
        rules.append("a forced publish needs a second admin's approval")
    st.caption(
        f"Policy ({ui.md(pol.source)}): {ui.md('; '.join(rules))}. Authors: {ui.md(', '.join(rs.authors) or 'unknown')}. "
        f"Reviews count for the head snapshot {rs.head} only."
    )
    label = {
        "none": "No review needed",
        "awaiting": "Awaiting approval",
        "approved": "Approved",
        "changes_requested": "Changes requested",
    }[rs.state.value]
    text = f"**{label}** · {len(rs.approvals)} of {pol.approvals} required approval(s) on the head"
    if rs.message:
        text += f" · {ui.md(rs.message)}"
    {"approved": st.success, "changes_requested": st.error, "awaiting": st.warning}.get(
        rs.state.value, st.info
    )(text)
    for icon, verb, reviews in (
        ("check_circle", "approved", rs.approvals),
        ("block", "changes requested", rs.changes_requested),
    ):
        for r in reviews:
            st.markdown(
                f":material/{icon}: {verb} by **{ui.md(r.user)}** at {ui.md(ui.short_time(r.at.isoformat()))}"
                + (f": {ui.md(r.comment)}" if r.comment else "")
            )
    for r in rs.ignored:
        st.caption(f"Not counted: {ui.md(r.user)} is an author of this batch.")
    for r in rs.dismissed:
        st.caption(
            f":material/history: Dismissed: {ui.md(r.user)}'s review ({ui.md(r.verdict.replace('_', ' '))}) of snapshot "
            f"{r.snapshot_id}: the branch moved since (a later commit or a rebase)."
        )


def review_panel(ctx: Context, tid: TableId, branch: str) -> None:
    """After the evidence and the actions: the review state of the head, Approve / Request changes, the thread and form."""
    try:
        rs = api.review_state(ctx, tid, branch)
    except WapError as exc:
        ui.show_error(exc)
        return
    st.markdown("#### Review")
    _review_state_lines(rs)
    allowed, why = api.approve_decision(ctx, tid, branch)
    d = ui.may(ctx, Permission.APPROVE)
    c1, c2 = st.columns(2)
    if ra.button(
        c1,
        "Approve",
        (allowed, why),
        icon=":material/thumb_up:",
        help=ui.md(f"Approve snapshot {rs.head}"),
        key="wf_approve",
    ):
        st.session_state[_DIALOG] = {"kind": "approve", "table": str(tid), "branch": branch, "head": rs.head}
    if ra.button(
        c2,
        "Request changes",
        d,
        icon=":material/rate_review:",
        help=ui.md("Block publish until you approve"),
        key="wf_changes",
    ):
        st.session_state[_DIALOG] = {"kind": "changes", "table": str(tid), "branch": branch, "head": rs.head}
    ra.locks([(allowed, why)])

    dialog = st.session_state.get(_DIALOG)
    if dialog and dialog.get("table") == str(tid) and dialog.get("branch") == branch:
        if dialog["kind"] == "approve":
            _approve_dialog(ctx, tid, branch, int(dialog["head"]))
        elif dialog["kind"] == "changes":
            _changes_dialog(ctx, tid, branch, int(dialog["head"]))
    thread(ctx, tid, branch)


@ui.dialog("Approve", on_dismiss=_close)
def _approve_dialog(ctx: Context, tid: TableId, branch: str, head: int) -> None:
    st.write(
        f"Approve snapshot {head} of {ui.md(tid, code=True)} · {ui.md(branch, code=True)} as {ui.md(ctx.user)}. "
        "A later commit or a rebase dismisses this approval."
    )
    comment = text_form("wf_approve_comment", "Comment (optional)", submit="Approve", cancel=_close)
    if comment is not None:
        ra.confirmed(
            lambda: api.approve(ctx, tid, branch, comment=comment or None),
            lambda rs: f"Approved {ui.md(tid)} · {ui.md(branch)}: review {ui.md(rs.state.value)}.",
            close=_close,
        )


@ui.dialog("Request changes", on_dismiss=_close)
def _changes_dialog(ctx: Context, tid: TableId, branch: str, head: int) -> None:
    st.write(
        f"Request changes on snapshot {head} of {ui.md(tid, code=True)} · {ui.md(branch, code=True)}: publish is blocked "
        "until you approve a head."
    )
    comment = changes_comment("wf_changes_comment", submit="Request changes", cancel=_close)
    if comment is not None:
        ra.confirmed(
            lambda: api.request_changes(ctx, tid, branch, comment=comment),
            lambda _rs: f"Changes requested on {ui.md(tid)} · {ui.md(branch)}.",
            close=_close,
        )


def thread(ctx: Context, tid: TableId, branch: str, *, checks: list[str] | None = None) -> None:
    """The branch's comment thread and (steward role) a comment form."""
    st.markdown("#### Discussion")
    try:
        items = api.comments(ctx, tid, branch)
    except WapError as exc:
        ui.show_error(exc)
        return
    if not items:
        st.caption("No comments yet.")
    for c in items:
        what = {
            CommentKind.APPROVED: "approved",
            CommentKind.CHANGES_REQUESTED: "requested changes",
        }.get(c.kind, "commented")
        about = f" on check {ui.md(c.check, code=True)}" if c.check else ""
        st.markdown(
            f"**{ui.md(c.user)}** {what}{about} · {ui.md(ui.short_time(c.at.isoformat()))} · snapshot {c.snapshot_id}"
        )
        if c.text:
            st.markdown(ui.md(c.text))
    d = ui.may(ctx, Permission.COMMENT)
    if not d.allowed:
        st.caption(f":material/lock: {ui.md(d.message)}")
        return
    with st.form("wf_comment_form", clear_on_submit=True):
        text = st.text_area("Comment", key="wf_comment_text")
        check = st.text_input("About check (optional)", key="wf_comment_check")
        if st.form_submit_button("Comment"):
            if not text.strip():
                st.error("Write something first.")
                return
            try:
                api.add_comment(ctx, tid, branch, text, check=check or None)
            except WapError as exc:
                ui.show_error(exc)
                return
            ui.writes_done()
            st.rerun()


# --------------------------------------------------------------------------- Branches page


def add_review_columns(df: pd.DataFrame, rows: Sequence[BranchInfo | BatchRow]) -> None:
    """Add ``review``, ``approvals`` and ``authors`` of each branch (from ``branches``) or batch (from
    ``batch_rows``) to the Branches table, in place."""
    labels = {
        ReviewState.NONE: "—",
        ReviewState.AWAITING: "awaiting",
        ReviewState.APPROVED: "approved",
        ReviewState.CHANGES_REQUESTED: "changes requested",
    }
    df["review state"] = [labels[r.review] for r in rows]
    df["approvals"] = [r.approvals for r in rows]
    df["authors"] = [", ".join(r.authors) for r in rows]


# --------------------------------------------------------------------------- History page


def history_actions(ctx: Context, table: str, timeline: list[TimelineSnapshot]) -> None:
    """Under main's timeline: Roll back (admin; confirm dialog with reason) and Reopen as branch for rolled-back batches."""

    tid = TableId.parse(table)
    st.markdown("##### Roll back main")
    admin = ui.may(ctx, Permission.ADMIN)
    if not admin.allowed:
        st.caption(f":material/lock: {ui.md(admin.message.replace('run admin actions', 'roll back'))}")
    head = timeline[0].snapshot_id if timeline else None
    for snap in timeline[1:20]:
        if _row_action(
            f"snapshot `{snap.snapshot_id}` · main moved here {ui.md(ui.short_time(snap.main_at or snap.at))} · "
            f"{ui.md(snap.operation)} · "
            f"{snap.total_records:,} rows · {ui.md(snap.user or '')}",
            ("Roll back", ":material/undo:", f"wf_rb_{snap.snapshot_id}"),
            admin,
            f"Move main back to snapshot {snap.snapshot_id}",
        ):
            st.session_state[_DIALOG] = {
                "kind": "rollback",
                "table": table,
                "to": snap.snapshot_id,
                "head": head,
            }
    gone = api.rolled_back_snapshots(ctx, tid)
    if gone:
        st.markdown("##### Rolled-back batches")
        steward = ui.may(ctx, Permission.INGEST)
        for g in gone:
            line = (
                f"snapshot `{g.snapshot_id}` · branch {ui.md(g.branch or '?')} · {g.rows:,} rows · rolled back by "
                f"{ui.md(g.rolled_back_by)}: {ui.md(g.reason or '')}"
            )
            if g.reopened_as is not None:  # reopened once: say where, never offer a duplicate
                _reopened_row(line, tid, g.snapshot_id, g.reopened_as)
            elif _row_action(
                line,
                ("Reopen as branch", ":material/call_split:", f"wf_ro_{g.snapshot_id}"),
                steward,
                "Make this batch a branch again, to review, fix and re-publish",
            ):
                _reopen(ctx, tid, g.snapshot_id)
    dialog = st.session_state.get(_DIALOG)
    if dialog and dialog.get("kind") == "rollback" and dialog.get("table") == table:
        _rollback_dialog(ctx, tid, int(dialog["to"]), dialog.get("head"))


def _reopened_row(line: str, tid: TableId, snapshot_id: int, branch: str) -> None:
    """A rolled-back batch already open again: the button disabled with the reason, and the link to its review."""
    c1, c2 = st.columns([4, 1])
    c1.markdown(line)
    c1.caption(
        f":material/call_split: Already open again as branch {ui.md(branch, code=True)}: "
        f"[review it]({ui.review_url(str(tid), branch)})"
    )
    c2.button(
        "Reopen as branch",
        key=f"wf_ro_{snapshot_id}",
        disabled=True,
        icon=":material/call_split:",
        help=ui.md(f"Already open again as branch {branch}: review it there"),
    )


def _row_action(line: str, button: tuple[str, str, str], gate: Decision, purpose: str) -> bool:
    """One row: ``line``, then a button ``(label, icon, key)`` that ``gate`` disables (its message as the
    help, else ``purpose``); whether it was clicked."""
    label, icon, key = button
    c1, c2 = st.columns([4, 1])
    c1.markdown(line)
    return c2.button(
        label,
        key=key,
        disabled=not gate.allowed,
        icon=icon,
        help=ui.md(purpose if gate.allowed else gate.message),
    )


@ui.dialog("Roll back main", on_dismiss=_close)
def _rollback_dialog(ctx: Context, tid: TableId, to: int, head: int | None) -> None:

    st.warning(
        f"Move main of {ui.md(tid, code=True)} back to snapshot {to}. Metadata only; the later batches can be reopened as branches."
    )
    whole = _batch_choice(ctx, tid, to)
    reason = text_form(
        "wf_rollback_reason",
        "Reason",
        submit="Roll back",
        required="A rollback needs a reason: it is recorded in the journal.",
        cancel=_close,
    )
    if reason is not None and whole is not None:
        ra.confirmed(
            lambda: api.rollback_batch(ctx, whole, reason=reason),
            lambda res: (
                f"Rolled back batch {ui.md(res.batch)}: "
                + "; ".join(f"{ui.md(t.table)} main {t.main_before} → {t.main_after}" for t in res.tables)
                + "."
            ),
            close=_close,
        )
    elif reason is not None:
        ra.confirmed(
            lambda: api.rollback(ctx, tid, to, reason=reason, expected_main=head),
            lambda res: f"Rolled back {ui.md(tid)}: main {res.main_before} → {res.main_after}.",
            close=_close,
        )


def _batch_choice(ctx: Context, tid: TableId, to: int) -> str | None:
    """When the rollback undoes the publish of a batch that spans tables: say so, and offer the batch's own
    rollback (every table, all or none) beside this table's alone; the batch chosen, or None (this table)."""
    undone = api.batches_taken_off(ctx, tid, to)
    if not undone:
        return None
    for b in undone:
        others = ", ".join(t for t in sorted(b.published.mains) if t != str(tid))
        st.warning(
            f"This undoes the publish of batch {ui.md(b.published.batch, code=True)}, which also published "
            f"{ui.md(others)}. Rolled back alone, {ui.md(tid, code=True)} leaves them on the batch, keeps the tag "
            f"{ui.md('batch-' + b.published.batch, code=True)}, and Reopen makes a {ui.md(tid)}-only branch."
        )
    newest = undone[0]
    name = newest.published.batch
    if not newest.allowed:
        st.caption(f"The batch's own rollback cannot run now: {ui.md(newest.message)}")
        return None
    whole = f"The whole batch {name}: every table back to its main before that publish (all or none)"
    alone = f"Only {tid}, to snapshot {to}"
    picked = st.radio("Roll back", [whole, alone], key=f"wf_rollback_scope_{tid}_{to}")
    return name if picked == whole else None


def _reopen(ctx: Context, tid: TableId, snapshot_id: int) -> None:
    ra.confirmed(
        lambda: api.reopen(ctx, tid, snapshot_id),
        lambda res: (
            f"Reopened snapshot {snapshot_id} as branch {ui.md(res.branch)}: "
            f"[review it]({ui.review_url(res.table, res.branch)}), fix it, publish it again."
        ),
    )


def how_it_ended(past: Sequence[JournalEntry]) -> str:
    """What the journal says ended a branch or a batch (``past``: its entries, newest first: the newest publish or
    discard), or that it never existed."""
    words = {
        "published": "published",
        "forced": "force-published",
        "discarded": "discarded",
        "expired": "expired by gc",
    }
    for e in past:  # newest first
        word = words.get(str(e.outcome))
        if word is not None and str(e.action) in ("publish", "discard"):
            why = f" ({ui.md(e.reason)})" if e.reason else ""
            return f"it was {word} by {ui.md(e.user)} on {ui.md(ui.local_time(e.at))}{why}"
    if past:
        return "the journal records it, but not its publish or discard (see below)"
    return "the journal has no record of it: it never existed here (check the name)"
