"""History: the journal (who did what, when, why), filterable; main's snapshot timeline per table.

Metadata only (journal + PyIceberg).
"""

from __future__ import annotations

import altair as alt
import streamlit as st

from pages import _common as ui
from pages import _workflow as wf
from wap_core.api import ACTIONS

ui.page_header("History", "Every ingest, audit, publish, rebase, discard and refusal, with who and why.")

with ui.wap_errors():
    tables = ui.table_names()
    f1, f2, f3, f4 = st.columns(4)
    linked = st.query_params.get("table")  # /history?table=NS.TABLE (the link of a rollback notification)
    table = f1.selectbox(
        "Table", ["All tables", *tables], index=1 + tables.index(linked) if linked in tables else 0
    )
    action = f2.selectbox("Action", ["All actions", *ACTIONS])
    entries = ui.journal(
        None if table == "All tables" else table, None if action == "All actions" else action, 2000
    )
    outcomes = sorted({e.outcome for e in entries})
    pick_outcome = f3.multiselect("Outcome", outcomes, placeholder="All outcomes")
    who = f4.text_input("User contains")
    shown = [
        e
        for e in entries
        if (not pick_outcome or e.outcome in pick_outcome) and (not who or who.lower() in e.user.lower())
    ]
    st.caption(f"{len(shown)} journal entries")
    df = ui.frame(
        shown,
        [
            "at",
            "user",
            "action",
            "table",
            "branch",
            "outcome",
            "reason",
            "snapshot_before",
            "snapshot_after",
            "details",
        ],
    )
    df["details"] = df["details"].map(ui.details_text)
    df["reason"] = df["reason"].map(ui.blank)
    df = ui.times_for_display(df, "at")
    ui.grid(
        df,
        height=360,
        column_config={
            "at": st.column_config.TextColumn("at", width="medium"),
            "action": st.column_config.TextColumn("action", pinned=True),
            "outcome": st.column_config.TextColumn("outcome", pinned=True),
            "snapshot_before": st.column_config.TextColumn("before", help="snapshot id before (exact)"),
            "snapshot_after": st.column_config.TextColumn("after", help="snapshot id after (exact)"),
            "details": st.column_config.TextColumn("details", width="large"),
        },
    )

    st.subheader("Main's snapshot timeline")
    if not tables:
        st.info("No tables yet.")
    else:
        # The table picked above, else the one whose main changed last (where the news is).
        default = table if table in tables else ui.latest_table(ui.table_infos(), tables)
        t = st.selectbox("Timeline of table", tables, index=tables.index(default) if default in tables else 0)
        tl = ui.timeline(t, "main")
        if not tl:
            st.caption("Main has no snapshots yet.")
        else:
            tdf = ui.frame(
                tl,
                [
                    "main_at",
                    "at",
                    "snapshot_id",
                    "parent_id",
                    "operation",
                    "added_records",
                    "total_records",
                    "user",
                    "source",
                ],
            )
            # rows on main over the time main MOVED (the snapshot log: a publish, a rollback), not when each
            # snapshot was written; a branch's earlier commits, passed over in one move, are not points of their own
            cdf = tdf.copy()
            cdf["moved"] = cdf["main_at"].fillna(cdf["at"])
            cdf = cdf.drop_duplicates("moved", keep="first")  # newest first: the snapshot main moved to
            cdf["time"] = ui.to_datetime(cdf["moved"])
            cdf["when"] = cdf["at"].map(ui.local_time)
            cdf["main_when"] = cdf["main_at"].map(ui.local_time)
            chart = (
                alt.Chart(cdf)
                .mark_line(point=alt.OverlayMarkDef(size=80), interpolate="step-after")
                .encode(
                    x=alt.X("time:T", axis=ui.time_axis(cdf["time"], "main moved")),
                    y=alt.Y("total_records:Q", title="rows on main", axis=alt.Axis(format=",d")),
                    tooltip=[
                        alt.Tooltip("snapshot_id:N", title="snapshot"),
                        alt.Tooltip("parent_id:N", title="parent"),
                        alt.Tooltip("main_when:N", title="main moved here"),
                        alt.Tooltip("moved:N", title="ISO time"),
                        alt.Tooltip("when:N", title="written"),
                        "operation:N",
                        alt.Tooltip("added_records:Q", format=",d"),
                        alt.Tooltip("total_records:Q", format=",d"),
                        "user:N",
                        "source:N",
                    ],
                )
                .properties(height=240)
            )
            st.altair_chart(chart, width="stretch")
            tdf = ui.times_for_display(tdf, "at", "main_at")
            ui.grid(
                tdf,
                column_config={
                    "main_at": st.column_config.TextColumn(
                        "main moved here", help="when main moved to this snapshot (a publish, a rollback)"
                    ),
                    "at": st.column_config.TextColumn("written", help="when the snapshot was written"),
                    "snapshot_id": st.column_config.TextColumn("snapshot"),
                    "parent_id": st.column_config.TextColumn("parent"),
                    "added_records": ui.count_column("added records"),
                    "total_records": ui.count_column("total records"),
                },
            )
        wf.history_actions(ui.context(), t, tl)  # Roll back (admin), Reopen as branch (steward)
