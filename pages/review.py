"""Review one audit branch: /review?table=NS.TABLE&branch=NAME (a deep link); /review?batch=NAME reviews a
batch that spans tables (:mod:`pages._batch_review`).

Order: the evidence first: the verdict, the failing checks with their rows (samples, a link to all of
them in Explore, the table whose rows fix a ``references`` failure), then the actions; after them the
approvals and the discussion, the metadata-only diff (instant), every check of the audit, then the diff
Spark computes (rows, schema, per-column profiles, distribution charts) and a preview.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from pages import _actions as ra
from pages import _batch_review as br
from pages import _common as ui
from pages import _quarantine_parts as qp
from pages import _review_parts as rv
from pages import _workflow as wf
from wap_core import api
from wap_core.api import CheckGuide, DiffResult, Permission
from wap_core.exceptions import ValidationError, WapError
from wap_core.identifiers import TableId, validate_branch

DIALOG = "review_dialog"
CLOSED = "review_closed"  # (table, branch) this session just published or discarded

ui.page_header("Review")
ctx = ui.context()
user = ctx.user

batch_q = st.query_params.get("batch")
if batch_q is not None:  # /review?batch=NAME: the Review of a batch that spans tables
    br.render(ctx, batch_q)
    st.stop()

table_q, branch_q = st.query_params.get("table"), st.query_params.get("branch")
if not table_q or not branch_q:
    open_branches = ui.branches()
    if not open_branches:
        st.info("No open audit branches to review.")
        st.stop()
    st.write(
        "Pick a branch to review, or open a link like `/review?table=demo.flights&branch=audit_2013_02_w2`."
    )
    ui.review_links(ui.batch_rows(), open_branches)
    st.stop()

try:
    tid = TableId.parse(table_q)
    branch = validate_branch(branch_q)
    tbl = api.table(ctx, tid)
except WapError as exc:
    ui.show_error(exc)
    st.stop()


st.subheader(f"{ui.md(tid)} · {ui.md(branch)}")
if branch not in api.branch_names(tbl):
    if ui.take(CLOSED) == (str(tid), branch):
        st.stop()  # this session just published or discarded it: its success message says it all
    past = [e for e in ui.journal(str(tid), limit=200) if e.branch == branch]
    st.warning(f"Branch {ui.md(repr(branch))} is not open on {ui.md(tid)}: {wf.how_it_ended(past)}.")
    if past:
        pdf = ui.frame(past, ["at", "user", "action", "outcome", "reason"])
        pdf["reason"] = pdf["reason"].map(ui.blank)
        ui.grid(ui.times_for_display(pdf, "at"), hide_index=True, width="stretch")
    st.page_link("pages/branches.py", label="Open branches", icon=":material/account_tree:")
    st.stop()

part_of = api.find_batch(ctx, branch)
if part_of is not None and tid in part_of:
    others = ", ".join(str(t) for t in part_of.table_ids if t != tid)
    st.info(
        f"**Part of batch {ui.md(branch)}**{' with ' + ui.md(others) if others else ''}: "
        "its tables are reviewed and published together.",
        icon=":material/stacks:",
    )
    st.page_link(
        "pages/review.py",
        label=f"Review batch {ui.md(branch)} (every table)",
        icon=":material/rate_review:",
        query_params={"batch": branch},
    )
head = api.ref_snapshot_id(tbl, branch)
audit = api.latest_audit(ctx, tid, branch)
ready = api.publish_readiness(ctx, tid, branch, tbl)
meta = api.metadata_diff(tbl, tid, branch)

# ----------------------------------------------------------------------------- verdict and evidence
rv.verdict(audit, head, ready, meta)
guides: dict[str, CheckGuide] = {}
try:  # the checks file's word on each check: all its failing rows in Explore, the table that fixes it
    guides = api.check_guides(ctx, tid)
except WapError as exc:
    ui.show_error(exc)
rv.failing_checks(audit, str(tid), branch, guides)
qp.section(ctx, tid, branch, audit, head, guides)  # the batch's quarantines; Quarantine failing rows (dialog)

# ----------------------------------------------------------------------------- actions


def _open(kind: str, **extra: Any) -> None:
    st.session_state[DIALOG] = {"kind": kind, "table": str(tid), "branch": branch, **extra}


def _close() -> None:
    st.session_state.pop(DIALOG, None)


st.markdown("#### Actions")
# Role-gated: each control is disabled with the core's reason; the core refuses anyway if called.
can = ra.gate(ctx)
a1, a2, a3, a4 = st.columns(4)
rerun_audit = ra.button(
    a1,
    "Re-run audit",
    can[Permission.AUDIT],
    icon=":material/replay:",
    help="Evaluate the table's checks on the branch head again",
)
if ra.button(
    a2,
    "Publish",
    can[Permission.PUBLISH],
    icon=":material/publish:",
    primary=True,
    ready=ready.allowed,
    help=ui.md(ready.message) if not ready.allowed else "Fast-forward main to this branch",
):
    _open("publish", force=False)
if ra.button(
    a3,
    "Discard",
    can[Permission.DISCARD],
    icon=":material/delete:",
    help="Drop the branch; main is untouched",
):
    _open("discard")
do_rebase = meta.main_moved and ra.button(
    a4, "Rebase", can[Permission.REBASE], icon=":material/merge:", help="Replay this batch onto current main"
)
can.locks(rebase=meta.main_moved)
if not ready.allowed and ready.code == "in_batch":  # the way is the batch's Review, not a CLI line
    st.warning(
        f"**Publish is disabled:** {ui.md(tid)} · {ui.md(branch)} is published with the other tables of batch "
        f"{ui.md(branch)}, all or none: from the batch's Review."
    )
    st.page_link(
        "pages/review.py",
        label=f"Publish batch {ui.md(branch)} from its Review",
        icon=":material/rate_review:",
        query_params={"batch": branch},
    )
elif not ready.allowed:
    st.warning(f"**Publish is disabled:** {ui.md(ready.message)}")
    if ready.forceable and can.force_publish(
        expander="Force publish (admins only, journaled with your reason)",
        caption="A forced publish overrides the audit. It needs a reason, which is recorded in the journal with your name.",
        label="Force publish",
        help="Publish over the audit, with a reason",
    ):
        _open("publish", force=True)
elif can[Permission.PUBLISH].allowed:
    st.success(f"Ready to publish: {ui.md(ready.message)}")
else:  # the branch may be published, not by who looks at it: no green "ready" beside a locked button
    st.info(f"Publishable by an approver: {ui.md(ready.message)}", icon=":material/lock:")

if rerun_audit:
    try:
        with st.status("Running the audit with Spark…", expanded=True) as s:
            st.write("Reading the branch's new rows and evaluating the suite…")
            result = api.run_audit(ctx, tid, branch)
            s.update(label=f"Audit {ui.md(result.status)}", state="complete")
        ui.writes_done()
        ui.flash(
            "success" if result.passed else "warning",
            f"Audit re-run by {ui.md(user)}: {ui.md(result.status)} ({result.rows_checked:,} rows, {len(result.checks)} checks).",
        )
        st.rerun()
    except WapError as exc:
        ui.show_error(exc)
if do_rebase:
    try:
        with st.status("Rebasing onto current main and auditing it with Spark…", expanded=True) as s:
            rb = api.rebase(ctx, tid, branch)  # the rebase audits the new head (as ingest does)
            s.update(label=f"Rebase: {ui.md(rb.outcome)}", state="complete")
        ui.writes_done()
        done = f"Rebased {ui.md(tid)} {ui.md(branch)} onto main ({ui.n_rows(rb.rows)} replayed)"
        if rb.audit is None:
            ui.flash("info", f"{ui.md(tid)} · {ui.md(branch)} is already on current main: nothing to rebase.")
        elif rb.audit.passed:
            ui.flash("success", f"{done} and audited again: {ui.md(rb.audit.status)}.")
        else:
            ui.flash(
                "warning",
                f"{done} and audited again: failed ({ui.md(', '.join(rb.audit.failed_checks))}); see the verdict below.",
            )
        st.rerun()
    except WapError as exc:
        ui.show_error(exc)


def _act(action: Callable[[], Any], message: Callable[[Any], str]) -> None:
    """Run a confirmed write (publish, discard: the branch is gone after it); on success close the dialog,
    clear caches and report once (no "not open" warning under it); else show the error."""
    ra.confirmed(action, message, close=_close, closed=(CLOSED, (str(tid), branch)))


_NEXT = (
    f"[History of {ui.md(tid)}](/history?table={tid}) · [Overview](/)"  # a validated name: safe in the URL
)


@ui.dialog("Publish to main", on_dismiss=_close)
def publish_dialog(force: bool) -> None:
    reason = wf.publish_reason(
        force,
        key="",
        forced=f"Force publish {ui.md(tid)} · {ui.md(branch)}: {ui.md(ready.message)}",
        plain=f"Fast-forward **main** of {ui.md(tid, code=True)} to branch {ui.md(branch, code=True)} ({ui.n_rows(meta.rows_added)} added).",
        placeholder="Why is publishing despite the audit acceptable?",
        cancel=_close,
    )
    if reason is not None:
        _act(
            lambda: api.publish(ctx, tid, branch, force=force, reason=reason or None),
            lambda res: (
                f"{'Force-published' if res.forced else 'Published'} {ui.md(tid)} · {ui.md(branch)}: main is now snapshot {ui.id_text(res.main_after)}. {_NEXT}"
            ),
        )


@ui.dialog("Discard branch", on_dismiss=_close)
def discard_dialog() -> None:
    st.write(
        f"Drop branch {ui.md(branch, code=True)} of {ui.md(tid, code=True)}. Main is not touched; the branch's rows will no longer be published."
    )
    reason = wf.discard_reason("discard_reason", placeholder="e.g. source file was incomplete", cancel=_close)
    if reason is not None:
        _act(
            lambda: api.discard(ctx, tid, branch, reason=reason),
            lambda _res: (
                f"Discarded {ui.md(tid)} · {ui.md(branch)} ({ui.md(reason)}). Main is unchanged. {_NEXT}"
            ),
        )


dialog = st.session_state.get(DIALOG)
if dialog and dialog.get("table") == str(tid) and dialog.get("branch") == branch:
    if dialog["kind"] == "publish":
        publish_dialog(bool(dialog.get("force")))
    elif dialog["kind"] == "discard":
        discard_dialog()

# ----------------------------------------------------------------------------- review, metadata, the audit
wf.review_panel(ctx, tid, branch)  # approvals on the head, Approve / Request changes, the thread

st.markdown("#### What the branch changes (metadata)")
rv.metadata_summary(meta)

st.markdown("#### Audit")
rv.audit_details(audit, head)

# ----------------------------------------------------------------------------- Spark diff + preview
st.markdown("#### Diff against main (Spark)")
if ui.dialog_open():  # its Confirm is taken at once (ui.dialog_open); the diff comes back when it closes
    st.caption("The diff is computed once the dialog is closed.")
    st.stop()
diff: DiffResult | None = None
try:
    if not ui.wait_for_spark(ctx):
        st.stop()
    with st.status("Computing the diff with Spark…", expanded=False) as s:
        diff = rv.cached_diff(str(tid), branch, head, _user=user)
        s.update(label=f"Diff computed on {diff.rows_added:,} new rows", state="complete")
except (WapError, ValidationError) as exc:
    ui.show_error(exc)
if diff is not None:
    rv.diff_details(diff, checks=audit.checks if audit else ())

rv.keyed_section(str(tid), branch, head, api.column_names(tbl), rv.key_columns(audit) if audit else [])

st.markdown("#### New rows (preview)")
try:
    with st.spinner("Reading the first new rows…"):
        ui.grid(rv.cached_preview(str(tid), branch, head), hide_index=True, width="stretch", height=320)
except WapError as exc:
    ui.show_error(exc)
