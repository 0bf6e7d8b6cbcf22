"""Overview: tables, open branches by status, recent publishes and refusals, audit outcomes over time.

Metadata only (PyIceberg + journal): this page never starts Spark.
"""

from __future__ import annotations

import altair as alt
import streamlit as st

from pages import _common as ui

ui.page_header("Overview", "Every table on main, the audit branches waiting for review, and what stewards did lately.")

with ui.wap_errors():
    tables = ui.table_infos()
    open_branches = ui.branches()
    entries = ui.journal(limit=1000)
    audits = ui.audit_record(limit=1000)

    counts = {s: sum(1 for b in open_branches if b["status"] == s) for s in ("passed", "warned", "failed", "stale", "not_audited", "incomplete")}
    cols = st.columns(7)
    cols[0].metric("Tables", len(tables))
    for col, (status, n) in zip(cols[1:], counts.items()):
        col.metric(ui.status_badge(status), n)

    st.subheader("Tables")
    if not tables:
        st.info("No tables yet: ingest a first batch on the Ingest page (or run `python -m wap_core demo`).")
    else:
        tdf = ui.frame(tables, ["table", "rows", "data_files", "size_bytes", "snapshots", "open_branches", "tags", "last_updated"])
        tdf["size"] = tdf["size_bytes"].map(ui.human_bytes)
        tdf["last_updated"] = ui.to_datetime(tdf["last_updated"])
        st.dataframe(tdf.drop(columns=["size_bytes"]), hide_index=True, width="stretch",
                     column_config={"last_updated": st.column_config.DatetimeColumn("last updated", format="YYYY-MM-DD HH:mm")})

    st.subheader("Open branches by status")
    if not open_branches:
        st.info("No open audit branches.")
    else:
        bdf = ui.frame(open_branches, ["table", "branch", "status", "rows_added", "main_moved", "failed_checks"])
        bdf["review"] = [ui.review_url(t, b) for t, b in zip(bdf["table"], bdf["branch"])]
        bdf["status"] = bdf["status"].map(ui.status_badge)
        bdf["failed_checks"] = bdf["failed_checks"].map(lambda xs: ", ".join(xs) if xs else "")
        st.dataframe(ui.style_status(bdf), hide_index=True, width="stretch",
                     column_config={"review": st.column_config.LinkColumn("review", display_text="Open review")})
        st.page_link("pages/branches.py", label="All branches, with filters", icon=":material/account_tree:")

    left, right = st.columns(2)
    with left:
        st.subheader("Recent publishes")
        pubs = [e for e in entries if e["action"] == "publish" and e["outcome"] in ("published", "forced")][:10]
        if pubs:
            st.dataframe(ui.frame(pubs, ["at", "user", "table", "branch", "outcome", "reason"]), hide_index=True, width="stretch")
        else:
            st.caption("Nothing published yet.")
    with right:
        st.subheader("Recent refusals and discards")
        refusals = [e for e in entries if e["outcome"] in ("refused", "discarded", "error")][:10]
        if refusals:
            st.dataframe(ui.frame(refusals, ["at", "user", "action", "table", "branch", "outcome", "reason"]), hide_index=True, width="stretch")
        else:
            st.caption("No refusals.")

    st.subheader("Audit outcomes over time")
    if audits:
        adf = ui.frame(audits, ["at", "table", "branch", "status"])
        adf["day"] = ui.to_datetime(adf["at"]).dt.floor("h")
        chart = (
            alt.Chart(adf)
            .mark_bar()
            .encode(
                x=alt.X("day:T", title="audit time (hour)"),
                y=alt.Y("count():Q", title="audits"),
                color=alt.Color("status:N", scale=alt.Scale(domain=list(ui.STATUS_COLOR), range=list(ui.STATUS_COLOR.values())),
                                legend=alt.Legend(title="outcome")),
                tooltip=["table:N", "branch:N", "status:N", "count():Q"],
            )
            .properties(height=260)
        )
        st.altair_chart(chart, width="stretch")
    else:
        st.caption("No audits recorded yet.")
