"""Ingest: upload a file (or name a server-side path), write it to a new audit branch, audit it, link to the review."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from pages import _common as ui
from wap_core import TableId
from wap_core.access import Permission
from wap_core.exceptions import ValidationError, WapError
from wap_core.identifiers import validate_branch
from wap_core.ingest import ingest
from wap_core.paths import SourcePolicy, describe_roots, save_upload

NEW = "➕ New table…"

ui.page_header("Ingest", "Write a batch to a new audit branch. Main is untouched until a steward publishes the branch.")
lh = ui.lakehouse()
user = ui.current_user(lh)
may_ingest = ui.may(lh, user, Permission.INGEST)
if not may_ingest.allowed:
    st.caption(f":material/lock: {ui.md(may_ingest.message)}")

with st.form("ingest"):
    source_kind = st.radio("Source", ["Upload a file", "Server-side path"], horizontal=True)
    upload = st.file_uploader("File (CSV, Parquet or JSON)", type=["csv", "parquet", "pq", "json", "jsonl", "ndjson"])
    server_path = st.text_input("Server-side path (file or glob)", placeholder="/data/incoming/flights_2013_03.csv",
                                help="Only under the allowed ingest roots (WAP_INGEST_ROOTS)")
    st.caption(f"Server-side paths must lie under: {ui.md(describe_roots(lh.settings))}")
    c1, c2 = st.columns(2)
    choice = c1.selectbox("Table", [NEW, *ui.table_names()])
    new_table = c2.text_input("New table name (namespace.table)", placeholder="demo.flights")
    c3, c4 = st.columns(2)
    branch_in = c3.text_input("Branch name (optional)", placeholder="generated when empty")
    fmt = c4.selectbox("Format", ["auto", "csv", "parquet", "json"])
    submitted = st.form_submit_button("Ingest and audit", type="primary", disabled=not may_ingest.allowed,
                                      help=None if may_ingest.allowed else ui.md(may_ingest.message))

if submitted:
    try:
        create = choice == NEW
        tid = TableId.parse(new_table.strip() if create else choice)
        branch = validate_branch(branch_in.strip()) if branch_in.strip() else None
        if source_kind == "Upload a file":
            if upload is None:
                raise ValidationError("choose a file to upload, or switch to a server-side path")
            # each upload in its own batch folder: two uploads of the same name never overwrite each other
            source = str(save_upload(lh.settings, upload.name, upload.getvalue()))
        else:
            if not server_path.strip():
                raise ValidationError("give a server-side path, or switch to uploading a file")
            source = str(Path(server_path.strip()).expanduser())
        with st.status(f"Ingesting into {ui.md(tid)}…", expanded=True) as status:
            st.write(f"Source: {ui.md(source, code=True)}")
            st.write("Spark reads the source, writes a new branch, then audits it (first use starts Spark: a few seconds)…")
            # confined: a server-side path is read only under the allowed ingest roots (and the uploads root)
            result = ingest(lh, tid, [source], branch=branch, fmt=None if fmt == "auto" else fmt, create=create, user=user,
                            source_policy=SourcePolicy.CONFINED)
            status.update(label=f"Wrote {result.rows_written:,} rows to {ui.md(tid)} · {ui.md(result.branch)}: audit {ui.md(result.audit.status)}",
                          state="complete" if result.audit.passed else "error")
        ui.writes_done()
        (st.success if result.audit.passed else st.warning)(
            f"Branch **{ui.md(result.branch)}** of **{ui.md(tid)}**: {result.rows_written:,} rows written, {result.malformed_rows:,} malformed, "
            f"audit **{ui.md(result.audit.status)}**."
        )
        st.page_link("pages/review.py", label=f"Review {ui.md(tid)} · {ui.md(result.branch)}", icon=":material/rate_review:",
                     query_params={"table": str(tid), "branch": result.branch})
    except WapError as exc:
        ui.show_error(exc)
