"""Branches: every open audit branch across all tables, filterable; each row links to its review.

Metadata only (PyIceberg + journal): this page never starts Spark.
"""

from __future__ import annotations

import streamlit as st

from pages import _common as ui
from pages import _workflow as wf
from wap_core.api import BRANCH_STATUSES

ui.page_header(
    "Branches", "Open audit branches. A branch is published only after its audit passes on its current head."
)

with ui.wap_errors():
    rows = ui.branches()
    f1, f2 = st.columns(2)
    tables = sorted({r.table for r in rows} | set(ui.table_names()))
    pick_tables = f1.multiselect("Table", tables, placeholder="All tables")
    pick_status = f2.multiselect(
        "Status", list(BRANCH_STATUSES), format_func=ui.status_badge, placeholder="All statuses"
    )
    shown = [
        r
        for r in rows
        if (not pick_tables or r.table in pick_tables) and (not pick_status or r.status in pick_status)
    ]
    st.caption(f"{len(shown)} of {len(rows)} open branches")
    if not shown:
        st.info("No open branch matches." if rows else "No open audit branches: ingest a batch to open one.")
    else:
        df = ui.frame(
            shown,
            [
                "table",
                "branch",
                "status",
                "failed_checks",
                "rows_added",
                "main_moved",
                "created",
                "last_audit_at",
            ],
        )
        df.insert(0, "review", [ui.review_url(t, b) for t, b in zip(df["table"], df["branch"], strict=False)])
        wf.add_review_columns(df, shown)  # review state and approvals on the head
        df["status"] = df["status"].map(ui.status_badge)
        df = ui.times_for_display(df, "created", "last_audit_at")
        df["failed_checks"] = df["failed_checks"].map(lambda xs: ", ".join(xs) if xs else "")
        ui.grid(
            ui.style_status(df),
            column_config={
                "review": st.column_config.LinkColumn(
                    "review", display_text="Review ↗", help="Open the branch's review", pinned=True
                ),
                "created": st.column_config.TextColumn("created"),
                "last_audit_at": st.column_config.TextColumn("last audit"),
                "rows_added": ui.count_column("rows added"),
                "main_moved": st.column_config.CheckboxColumn("main moved"),
                "failed_checks": st.column_config.TextColumn("failed checks", width="large"),
            },
        )
        st.markdown("**Review a branch**")
        for r in shown:
            st.page_link(
                "pages/review.py",
                label=f"{ui.md(r.table)} · {ui.md(r.branch)} — {ui.md(ui.status_badge(r.status))}",
                query_params={"table": r.table, "branch": r.branch},
            )
