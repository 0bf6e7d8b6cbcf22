"""Overview: tables, open branches by status, recent publishes and refusals, audit outcomes over time.

Metadata only (PyIceberg + journal): this page never starts Spark.
"""

from __future__ import annotations

import altair as alt
import streamlit as st

from pages import _common as ui
from wap_core.api import JournalEntry
from wap_core.states import MAIN_MOVES, BranchStatus, Outcome


def _recent(rows: list[JournalEntry], columns: list[str]) -> None:
    """Outcome and reason first (a forced publish must not look like any other); blanks for none; local
    times. A static table whose reasons wrap: the reason and the time are always shown whole."""
    df = ui.frame(rows, columns)
    df["reason"] = df["reason"].map(ui.blank)
    ui.text_table(ui.times_for_display(df, "at"), nowrap=("at",))


ui.page_header(
    "Overview", "Every table on main, the audit branches waiting for review, and what stewards did lately."
)

with ui.wap_errors():
    tables = ui.table_infos()
    open_branches = ui.branches()
    entries = ui.journal(limit=1000)
    audits = ui.audit_record(limit=1000)

    counts = {
        s: sum(1 for b in open_branches if b.status is s)
        for s in (
            BranchStatus.PASSED,
            BranchStatus.WARNED,
            BranchStatus.FAILED,
            BranchStatus.STALE,
            BranchStatus.NOT_AUDITED,
            BranchStatus.INCOMPLETE,
        )
    }
    cols = st.columns(7)
    cols[0].metric("Tables", len(tables))
    for col, (status, n) in zip(cols[1:], counts.items(), strict=False):
        col.metric(ui.status_badge(status), n)

    st.subheader("Tables")
    if not tables:
        st.info("No tables yet: ingest a first batch on the Ingest page (or run `python -m wap_core demo`).")
    else:
        tdf = ui.frame(
            tables,
            [
                "table",
                "rows",
                "data_files",
                "size_bytes",
                "snapshots",
                "open_branches",
                "tags",
                "last_updated",
            ],
        )
        tdf["size"] = tdf["size_bytes"].map(ui.human_bytes)
        tdf = ui.times_for_display(tdf, "last_updated")
        ui.grid(
            tdf.drop(columns=["size_bytes"]),
            column_config={
                "table": st.column_config.TextColumn("table", pinned=True),
                "rows": ui.count_column("rows"),
                "data_files": ui.count_column("data files"),
                "snapshots": ui.count_column("snapshots"),
                "open_branches": ui.count_column("open branches"),
                "last_updated": st.column_config.TextColumn("last updated", help="main's last change"),
            },
        )

    st.subheader("Open branches by status")
    if not open_branches:
        st.info("No open audit branches.")
    else:
        bdf = ui.frame(
            open_branches, ["table", "branch", "status", "rows_added", "main_moved", "failed_checks"]
        )
        bdf.insert(
            0, "review", [ui.review_url(t, b) for t, b in zip(bdf["table"], bdf["branch"], strict=False)]
        )
        bdf["status"] = bdf["status"].map(ui.status_badge)
        # the free text last: the short columns stay in sight at any width
        bdf["failed_checks"] = bdf["failed_checks"].map(lambda xs: ", ".join(xs) if xs else "")
        ui.grid(
            ui.style_status(bdf),
            column_config={
                "review": st.column_config.LinkColumn("review", display_text="Open review", pinned=True),
                "rows_added": ui.count_column("rows added"),
                "failed_checks": st.column_config.TextColumn("failed checks", width="large"),
                "main_moved": st.column_config.CheckboxColumn("main moved"),  # as Branches labels it
            },
        )
        st.page_link("pages/branches.py", label="All branches, with filters", icon=":material/account_tree:")

    st.subheader("Recent publishes and rollbacks")
    # every move of main: a publish (a reopened batch's too), a forced publish, a rollback (branch: main)
    pubs = [e for e in entries if e.outcome in MAIN_MOVES][:10]
    if pubs:
        _recent(pubs, ["outcome", "reason", "at", "table", "branch", "user"])
    else:
        st.caption("Nothing published yet.")
    st.subheader("Recent refusals and discards")
    refusals = [e for e in entries if e.outcome in (Outcome.REFUSED, Outcome.DISCARDED, Outcome.ERROR)][:10]
    if refusals:
        _recent(refusals, ["outcome", "action", "reason", "at", "table", "branch", "user"])
    else:
        st.caption("No refusals.")

    st.subheader("Audit outcomes over time")
    if audits:
        adf = ui.frame(audits, ["at", "table", "branch", "status"])
        bins = ui.time_bins(ui.to_datetime(adf["at"]))
        adf["bin"], adf["end"] = bins.starts, bins.ends
        adf["when"] = adf["bin"].map(ui.local_time)
        outcomes = [s for s in ui.STATUS_COLOR if s in set(adf["status"])]
        # Each bar spans its bin on the time axis (x to x2), with a gap; a tick and a label per bin start.
        chart = (
            alt.Chart(adf)
            .mark_bar(stroke="white", strokeWidth=1)
            .encode(
                x=alt.X(
                    "bin:T",
                    title=f"audit time (per {bins.label})",
                    scale=alt.Scale(domain=[bins.domain[0].isoformat(), bins.domain[1].isoformat()]),
                    axis=alt.Axis(
                        format=bins.format,
                        labelAngle=-30,
                        values=bins.ticks,
                        labelOverlap=True,
                    ),
                ),
                x2="end:T",
                y=alt.Y("count():Q", title="audits", axis=alt.Axis(tickMinStep=1)),
                color=alt.Color(
                    "status:N",
                    scale=alt.Scale(domain=outcomes, range=[ui.STATUS_COLOR[o] for o in outcomes]),
                    legend=alt.Legend(title="outcome"),
                ),
                tooltip=[
                    alt.Tooltip("when:N", title=f"{bins.label} from"),
                    "status:N",
                    alt.Tooltip("count():Q", title="audits"),
                ],
            )
            .properties(height=260)
        )
        st.altair_chart(chart, width="stretch")
    else:
        st.caption("No audits recorded yet.")
