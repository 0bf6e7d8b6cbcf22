"""The Review of a batch that spans tables: /review?batch=NAME (``pages/review.py`` hands over to :func:`render`).

Order, as the one-branch Review's: the evidence first: the batch's verdict (its worst table's) and a line per
table, then the cross-table checks (the checks that read another table, e.g. ``references``: they decide
whether the tables belong together), then the batch's readiness (every table's publish check, the batch's
message), what a publish guarantees on this catalog (atomic: yes / only against failures, not crashes) and
the batch's actions; then each table: its verdict, its other failing checks with their rows, what its branch
changes (metadata), every check of its audit; last, each table's diff against main (Spark). The parts are the
one-branch Review's (:mod:`pages._review_parts`), per table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import streamlit as st

from pages import _common as ui
from pages import _review_parts as rv
from wap_core import api
from wap_core.api import AuditResult, BatchReadiness, CheckGuide, Context, MetadataDiff, PublishCheck
from wap_core.exceptions import ValidationError, WapError
from wap_core.identifiers import TableId, validate_branch
from wap_core.states import BranchStatus, branch_status, worst_branch_status

CLOSED = "batch_review_closed"  # the batch this session just published or discarded


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


def _not_open(name: str) -> None:
    """A name that is no open batch: one line, and the way back (nothing under it after this session's own
    publish or discard: its success message says it all)."""
    if st.session_state.pop(CLOSED, None) == name:
        return
    st.warning(
        f"No open batch {ui.md(repr(name))}: it was published, discarded or never existed "
        "(no table has an open branch of a batch of that name)."
    )
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
        _not_open(name)
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
    _readiness(ready)
    for p in parts:
        _table(name, p)
    _diffs(ctx, name, parts)


# ----------------------------------------------------------------------------- the evidence
def _verdict(parts: list[_Part]) -> None:
    """The batch's status (its worst table's) in one box, then a line per table."""
    worst = worst_branch_status(p.status for p in parts)
    bad = [p for p in parts if p.status is worst]
    names = ", ".join(f"**{ui.md(p.table)}**" for p in bad)
    icon = ui.STATUS_MATERIAL[worst]
    n = f"{len(bad)} of {len(parts)} tables"
    if worst is BranchStatus.PASSED:
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


def _readiness(ready: BatchReadiness) -> None:
    """Every table's publish check, the batch's message, and what a publish guarantees on this catalog."""
    st.markdown("#### Publish the batch")
    if ready.allowed:
        st.success(f"Ready to publish every table together: {ui.md(ready.message)}")
    else:
        st.warning(f"**Publish is disabled:** {ui.md(ready.message)}")
    st.info(
        f"Atomic on this catalog: **{ui.md(ready.atomicity.label)}**",
        icon=":material/lock:" if ready.atomicity.label == "yes" else ":material/warning:",
    )
    st.caption(
        "yes: every table's main moves in one database transaction, or none does, also across a crash. "
        "only against failures, not crashes: the catalog commits the tables together and undoes them when one "
        "fails, but a crash in the middle can leave some tables published (see the README's note on REST "
        "catalogs)."
    )


def _table(name: str, p: _Part) -> None:
    """One table of the batch: its verdict, its other failing checks, what it changes, every check."""
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
