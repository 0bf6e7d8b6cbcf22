"""Branches: every open audit branch across all tables, filterable; each row links to its review.

A batch that spans tables is ONE row (its tables, its worst status, the rows it adds) linking to
``/review?batch=NAME``; its tables are not listed again on their own. A plain branch's row is as it was.

Metadata only (PyIceberg + journal): this page never starts Spark.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages import _common as ui
from pages import _workflow as wf
from wap_core.api import BRANCH_STATUSES

ui.page_header(
    "Branches", "Open audit branches. A branch is published only after its audit passes on its current head."
)

with ui.wap_errors():
    rows = ui.branches()
    batches = ui.batch_rows()  # a batch that spans tables: ONE row for all its tables
    plain = [r for r in rows if not any(b.member(r.table, r.branch) for b in batches)]
    f1, f2 = st.columns(2)
    tables = sorted({r.table for r in rows} | set(ui.table_names()))
    pick_tables = f1.multiselect("Table", tables, placeholder="All tables")
    pick_status = f2.multiselect(
        "Status", list(BRANCH_STATUSES), format_func=ui.status_badge, placeholder="All statuses"
    )
    shown_batches = [
        b
        for b in batches
        if (not pick_tables or set(b.tables) & set(pick_tables))
        and (not pick_status or b.status in pick_status)
    ]
    shown = [
        r
        for r in plain
        if (not pick_tables or r.table in pick_tables) and (not pick_status or r.status in pick_status)
    ]
    total = len(plain) + len(batches)
    what = "open branches and batches (a batch's tables in one row)" if batches else "open branches"
    st.caption(f"{len(shown) + len(shown_batches)} of {total} {what}")
    if not shown and not shown_batches:
        st.info("No open branch matches." if rows else "No open audit branches: ingest a batch to open one.")
    else:
        columns = [  # main moved beside the status (a passed branch whose main moved needs a rebase first),
            # the counts before the wide failed-checks column: all on screen at 1440 px
            "table",
            "branch",
            "status",
            "main_moved",
            "rows_added",
            "failed_checks",
            "created",
            "last_audit_at",
        ]
        batch_df = ui.frame(
            [
                {
                    "table": ", ".join(b.tables),
                    "branch": b.batch,
                    "status": b.status.value,
                    "failed_checks": list(b.failed_checks),
                    "rows_added": b.rows_added,
                    "main_moved": b.main_moved,
                    "created": b.created,
                    "last_audit_at": b.last_audit_at,
                }
                for b in shown_batches
            ],
            columns,
        )
        batch_df.insert(0, "review", [ui.batch_review_url(b.batch) for b in shown_batches])
        branch_df = ui.frame(shown, columns)
        branch_df.insert(
            0,
            "review",
            [ui.review_url(t, b) for t, b in zip(branch_df["table"], branch_df["branch"], strict=False)],
        )
        df = pd.concat([batch_df, branch_df], ignore_index=True) if shown_batches else branch_df
        df.insert(3, "batch", [True] * len(shown_batches) + [False] * len(shown))
        wf.add_review_columns(df, [*shown_batches, *shown])  # review state and approvals on the head(s)
        df["status"] = [
            # not green while main moved: publishing needs a rebase (and its audit) first
            ui.status_badge(v) + (" · rebase first" if moved and v in ("passed", "warned") else "")
            for v, moved in zip(df["status"], df["main_moved"], strict=True)
        ]
        df = ui.times_for_display(df, "created", "last_audit_at")
        df["failed_checks"] = df["failed_checks"].map(lambda xs: ", ".join(xs) if xs else "")
        ui.grid(
            ui.style_status(df),
            column_config={
                "review": st.column_config.LinkColumn(
                    "review",
                    display_text="Review ↗",
                    help="Open the branch's (or the batch's) review",
                    pinned=True,
                ),
                "batch": st.column_config.CheckboxColumn(
                    "batch",
                    help="A batch that spans tables: its tables (each on a branch of the batch's name) in one row, "
                    "reviewed and published together",
                ),
                "created": st.column_config.TextColumn("created"),
                "last_audit_at": st.column_config.TextColumn("last audit"),
                "rows_added": ui.count_column("rows added"),
                "main_moved": st.column_config.CheckboxColumn("main moved"),
                "failed_checks": st.column_config.TextColumn("failed checks", width="large"),
            },
        )
        st.markdown("**Review a branch**" if not batches else "**Review a batch or a branch**")
        ui.review_links(shown_batches, shown)
