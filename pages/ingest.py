"""Ingest: upload a file (or name a server-side path), write it to a new audit branch, audit it, link to the review."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from pages import _common as ui
from wap_core import TableId
from wap_core.config import is_url
from wap_core.exceptions import ValidationError, WapError
from wap_core.identifiers import validate_branch
from wap_core.security.access import Permission
from wap_core.security.paths import SourcePolicy, describe_roots, save_upload
from wap_core.workflow.ingest import Duplicate, content_hash, find_duplicate, ingest

NEW = "New table…"

ui.page_header(
    "Ingest", "Write a batch to a new audit branch. Main is untouched until a steward publishes the branch."
)
lh = ui.lakehouse()
user = ui.current_user(lh)
may_ingest = ui.may(lh, user, Permission.INGEST)
if not may_ingest.allowed:
    st.caption(f":material/lock: {ui.md(may_ingest.message)}")

# The source kind and the table rerun the page when changed, so the form shows only the fields they need.
source_kind = st.radio("Source", ["Upload a file", "Server-side path"], horizontal=True, key="ingest_source")
tables = ui.table_names()
choice = st.selectbox(
    "Table", [*tables, NEW], key="ingest_table", help="An existing table, or the last entry to create one"
)
with st.form("ingest"):
    upload = None
    server_path = ""
    if source_kind == "Upload a file":
        upload = st.file_uploader(
            "File (CSV, Parquet or JSON)", type=["csv", "parquet", "pq", "json", "jsonl", "ndjson"]
        )
    else:
        server_path = st.text_input(
            "Server-side path (file or glob)",
            placeholder="/data/incoming/flights_2013_03.csv",
            help="Only under the allowed ingest roots (WAP_INGEST_ROOTS)",
            key="ingest_path",
        )
        st.caption(f"Server-side paths must lie under: {ui.md(describe_roots(lh.settings))}")
    new_table = ""
    if choice == NEW:
        new_table = st.text_input(
            "New table name (namespace.table)", placeholder="demo.flights", key="ingest_new_table"
        )
    c3, c4 = st.columns(2)
    branch_in = c3.text_input(
        "Branch name (optional)", placeholder="generated when empty", key="ingest_branch"
    )
    fmt = c4.selectbox("Format", ["auto", "csv", "parquet", "json"], key="ingest_format")
    submitted = st.form_submit_button(
        "Ingest and audit",
        type="primary",
        disabled=not may_ingest.allowed,
        help=None if may_ingest.allowed else ui.md(may_ingest.message),
    )

PENDING = "ingest_pending"
STEPS = {
    "reading": "Reading the source…",
    "writing": "Writing {rows} rows to a new branch…",
    "auditing": "Auditing {rows} rows…",
    "done": "Done: {rows} rows written and audited.",
}


def _run(job: dict[str, Any]) -> None:
    """Ingest with live steps (reading → writing → auditing, with row counts as they become known)."""
    tid = TableId.parse(str(job["table"]))
    if not ui.wait_for_spark(lh):
        return
    try:
        with st.status(f"Ingesting into {ui.md(tid)}…", expanded=True) as status:
            st.write(f"Source: {ui.md(job['source'], code=True)}")

            def progress(step: str, rows: int | None) -> None:
                text = STEPS.get(step, step).format(rows=f"{rows:,}" if rows is not None else "the")
                status.update(label=f"{ui.md(tid)}: {text}")
                st.write(f"{'✔' if step == 'done' else '›'} {text}")

            # confined: a server-side path is read only under the allowed ingest roots (and the uploads root)
            result = ingest(
                lh,
                tid,
                [str(job["source"])],
                branch=job["branch"],
                fmt=job["fmt"],
                create=bool(job["create"]),
                user=user,
                source_policy=SourcePolicy.CONFINED,
                progress=progress,
            )
            status.update(
                label=f"Wrote {result.rows_written:,} rows to {ui.md(tid)} · {ui.md(result.branch)}: audit {ui.md(result.audit.status)}",
                state="complete" if result.audit.passed else "error",
            )
    except WapError as exc:
        ui.show_error(exc)
        return
    ui.writes_done()
    failed = result.audit.failed_checks
    (st.success if result.audit.passed else st.warning)(
        f"Branch **{ui.md(result.branch)}** of **{ui.md(tid)}**: {result.rows_written:,} rows written, {result.malformed_rows:,} malformed, "
        f"audit **{ui.md(result.audit.status)}**."
        + (f"  \nFailed checks: {', '.join('**' + ui.md(n) + '**' for n in failed)}" if failed else "")
    )
    for note in result.narrowing:  # the schema check's notes: the table's type cannot hold every source value
        st.info(ui.md(note), icon=":material/compress:")
    st.page_link(
        "pages/review.py",
        label=f"Review {ui.md(tid)} · {ui.md(result.branch)}",
        icon=":material/rate_review:",
        query_params={"table": str(tid), "branch": result.branch},
    )


if submitted:
    st.session_state.pop(PENDING, None)
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
            typed = server_path.strip()  # an s3a:// URL stays as typed (a Path would fold its '//')
            source = typed if is_url(typed) else str(Path(typed).expanduser())
        job: dict[str, object] = {
            "table": str(tid),
            "source": source,
            "branch": branch,
            "fmt": None if fmt == "auto" else fmt,
            "create": create,
        }
        duplicate = None
        if (
            not create and Path(source).is_file()
        ):  # metadata only: the same bytes already ingested into this table?
            duplicate = find_duplicate(lh, tid, content_hash([source]))
        if duplicate is None:
            _run(job)
        else:
            st.session_state[PENDING] = {**job, "duplicate": duplicate}
    except WapError as exc:
        ui.show_error(exc)

pending = st.session_state.get(PENDING)
if pending:
    dup: Duplicate = pending["duplicate"]
    where = f"branch **{ui.md(dup.branch)}**" if dup.branch else "main"
    state = "already published to main" if dup.on_main else "on an open branch"
    st.warning(
        f"**This file was already ingested into {ui.md(dup.table)}**: same content as {where} "
        f"(snapshot {ui.id_text(dup.snapshot_id)}, {ui.md(ui.local_time(dup.at))}), {state}. "
        "Ingesting it again duplicates its rows.",
        icon=":material/content_copy:",
    )
    if dup.open_branch and dup.branch:
        st.page_link(
            "pages/review.py",
            label=f"Review the earlier branch {ui.md(dup.branch)}",
            icon=":material/rate_review:",
            query_params={"table": dup.table, "branch": dup.branch},
        )
    d1, d2 = st.columns(2)
    if d1.button("Ingest anyway", icon=":material/warning:", disabled=not may_ingest.allowed):
        st.session_state.pop(PENDING, None)
        _run({k: v for k, v in pending.items() if k != "duplicate"})
    elif d2.button("Cancel"):
        st.session_state.pop(PENDING, None)
        st.rerun()
