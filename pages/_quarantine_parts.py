"""Quarantine on Review (the one-table Review and each table of a batch's Review): the batch's quarantines
(counts per check, from the journal: no Spark; a link to the Quarantine page) and the Quarantine dialog.

The dialog is a form: the failing row-level checks of the branch's audit, each ticked (the core's default:
every failing one), the failing aggregate checks listed as "cannot be repaired by removing rows", and a
reason. The button is hidden from who may not quarantine (the core's ``authorize`` decides anyway).
"""

from __future__ import annotations

from urllib.parse import urlencode

import streamlit as st

from pages import _common as ui
from wap_core import api
from wap_core.api import AuditResult, CheckGuide, Context, Level, Permission
from wap_core.exceptions import WapError
from wap_core.identifiers import TableId
from wap_core.states import CheckStatus

DIALOG = "quarantine_dialog"  # the open dialog: {"table": NS.TABLE, "branch": NAME}
SUFFIX = "__quarantine"
_NO_ROWS = frozenset({"malformed_rows"})  # counts source lines that never became rows (the core refuses it)


def is_quarantine_table(table: TableId | str) -> bool:
    """A quarantine table (``<ns>.<table>__quarantine``): it has no Quarantine of its own."""
    return str(table).endswith(SUFFIX)


def page_url(table: TableId | str, batch: str | None = None) -> str:
    """The Quarantine page of ``table`` (of ``batch``): validated names, safe in the URL."""
    q = {"table": str(table), **({"batch": batch} if batch else {})}
    return f"/quarantine?{urlencode(q)}"


def _failing(
    audit: AuditResult | None, guides: dict[str, CheckGuide]
) -> tuple[list[tuple[str, int, bool]], list[str]]:
    """The checks of the audit with failing rows: (row-level ones a quarantine can apply, as (name, failing rows,
    ticked by default), and the ones it cannot). Ticked by default: what the core applies when none is named,
    the failed fail-level checks of a failed audit; a warn-level check or one passed within its
    ``max_failing_rows`` is offered unticked."""
    if audit is None:
        return [], []
    failing = [c for c in audit.checks if c.status is CheckStatus.FAILED or (c.failing_rows or 0) > 0]
    rows: list[tuple[str, int, bool]] = []
    whole: list[str] = []
    for c in failing:
        g = guides.get(c.name)
        if g is not None and g.opens_rows and g.type not in _NO_ROWS:
            default = not audit.status.ok and c.status is CheckStatus.FAILED and c.level is Level.FAIL
            rows.append((c.name, int(c.failing_rows or 0), default))
        else:
            whole.append(c.name)
    return rows, whole


def _close() -> None:
    st.session_state.pop(DIALOG, None)


def section(
    ctx: Context,
    tid: TableId,
    branch: str,
    audit: AuditResult | None,
    head: int | None,
    guides: dict[str, CheckGuide],
) -> None:
    """The batch's quarantines of ``tid`` (counts per check, a link) and the Quarantine button and dialog."""
    if is_quarantine_table(tid):
        return
    done = [
        e
        for e in ui.journal(str(tid), action="quarantine", limit=200)
        if e.branch == branch and e.outcome == "quarantined"
    ]
    rows, whole = _failing(audit, guides) if audit is not None and audit.snapshot_id == head else ([], [])
    if not done and not rows:
        return
    st.markdown(f"#### Quarantine of {ui.md(tid)}")
    for e in reversed(done):  # oldest first
        details = e.details or {}
        checks = details.get("checks") or {}
        per = ", ".join(f"{ui.md(name)} {int(n):,}" for name, n in checks.items())
        st.info(
            f"**{int(details.get('quarantined', 0)):,} rows quarantined** by {ui.md(e.user)} "
            f"({ui.md(ui.local_time(e.at))}): {per}. Reason: {ui.md(e.reason or '-')}",
            icon=":material/inventory_2:",
        )
    if done:
        st.markdown(f"[Quarantined rows of {ui.md(tid)} in batch {ui.md(branch)}]({page_url(tid, branch)})")
    if not rows:
        return
    can = ui.may(ctx, Permission.QUARANTINE)
    if not can.allowed:
        return  # hidden from who may not quarantine (the core refuses anyway)
    if st.button(
        "Quarantine failing rows",
        icon=":material/move_down:",
        key=f"quarantine_{tid}_{branch}",
        help="Move the batch's rows that fail the chosen row-level checks to the table's quarantine table",
    ):
        st.session_state[DIALOG] = {"table": str(tid), "branch": branch}
    dialog = st.session_state.get(DIALOG)
    if dialog and dialog.get("table") == str(tid) and dialog.get("branch") == branch:
        _dialog(ctx, tid, branch, rows, whole)


@ui.dialog("Quarantine failing rows", on_dismiss=_close)
def _dialog(
    ctx: Context, tid: TableId, branch: str, rows: list[tuple[str, int, bool]], whole: list[str]
) -> None:
    st.write(
        f"Move the rows of batch {ui.md(branch, code=True)} of {ui.md(tid, code=True)} that fail the ticked checks "
        f"to {ui.md(str(tid) + SUFFIX, code=True)}, on the batch's branch: they publish or are discarded with "
        "the batch. Main's own rows are never touched. The branch is audited again at once."
    )
    with st.form("quarantine_form", border=False):
        st.markdown("**Row-level checks to apply**")
        ticked = [
            n
            for n, failing, default in rows
            if st.checkbox(
                f"{ui.md(n)} · {failing:,} failing row{'s' if failing != 1 else ''}",
                value=default,
                key=f"quarantine_check_{n}",
                help=None
                if default
                else "a warn-level check, or one within its max_failing_rows: only when ticked",
            )
        ]
        if whole:
            st.markdown("**Cannot be repaired by removing rows**")
            for name in whole:
                st.caption(f"{ui.md(name)}: cannot be repaired by removing rows")
        reason = st.text_input(
            "Reason", key="quarantine_reason", required=True, placeholder="e.g. cancelled flights"
        )
        submitted = st.form_submit_button("Quarantine", type="primary", width="stretch")
    if st.button("Cancel", key="quarantine_cancel", width="stretch"):
        _close()
        st.rerun()
    if not submitted:
        return
    reason = (reason or "").strip()
    if not reason:
        st.error("A quarantine needs a reason: it is recorded with the rows and in the journal.")
        return
    if not ticked:
        st.error("Tick at least one check.")
        return
    try:
        with st.spinner("Quarantining the failing rows and auditing the branch again with Spark…"):
            q = api.quarantine(ctx, tid, branch, checks=ticked, reason=reason)
    except WapError as exc:
        ui.show_error(exc)
        return
    _close()
    ui.writes_done()
    per = ", ".join(f"{ui.md(name)} {n:,}" for name, n in q.checks.items())
    audit = f"; audit {ui.md(q.audit.status)}" if q.audit is not None else ""
    ui.flash(
        "success" if q.audit is None or q.audit.passed else "warning",
        f"Quarantined {q.quarantined:,} of {q.rows_before:,} rows of {ui.md(tid)} · {ui.md(branch)} into "
        f"{ui.md(q.quarantine_table)} ({per}){audit}. [See them]({page_url(tid, branch)})",
    )
    st.rerun()
