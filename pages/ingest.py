"""Ingest: upload a file (or name a server-side path), write it to a new audit branch, audit it, link to the review.

A table can be added to an open batch that spans tables (or start one): its branch is named like the batch and
the page links the batch's Review too; /ingest?table=NS.TABLE&batch=NAME opens with both chosen.

/ingest?table=NS.TABLE opens with that table chosen (Review links it when another table's rows fix a
failed check); the chosen table's columns (name, type, nullability, from its metadata: no Spark) and a
template CSV (its header row) are shown before anything is uploaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from pages import _common as ui
from wap_core import api
from wap_core.api import Duplicate, Permission, SourcePolicy, content_hash, describe_roots, template_csv
from wap_core.config import is_url, mask_secrets
from wap_core.exceptions import ValidationError, WapError, first_line
from wap_core.identifiers import TableId, validate_branch

NEW = "New table…"
NO_BATCH = "No batch (a branch of its own)"
NEW_BATCH = "New batch…"

ui.page_header(
    "Ingest", "Write a batch to a new audit branch. Main is untouched until a steward publishes the branch."
)
ctx = ui.context()
may_ingest = ui.may(ctx, Permission.INGEST)
if not may_ingest.allowed:
    st.caption(f":material/lock: {ui.md(may_ingest.message)}")

# The source kind and the table rerun the page when changed, so the form shows only the fields they need.
source_kind = st.radio("Source", ["Upload a file", "Server-side path"], horizontal=True, key="ingest_source")
tables = ui.table_names()
# ?table= preselects an existing table (an exact name among them: anything else is ignored), once per link
q_table = st.query_params.get("table")
if q_table in tables and st.session_state.get("ingest_table_url") != q_table:
    st.session_state["ingest_table"] = q_table
st.session_state["ingest_table_url"] = q_table
choice = st.selectbox(
    "Table",
    [*tables, NEW],
    index=None,
    placeholder="Choose a table…",
    key="ingest_table",
    help="An existing table, or the last entry to create one",
)
if choice is not None and choice != NEW:
    if st.query_params.get("table") != choice:
        st.query_params["table"] = choice
    try:
        columns = api.target_columns(ctx, TableId.parse(choice))
    except WapError as exc:
        ui.show_error(exc)
        columns = ()
    if columns:
        st.markdown(
            f"**Columns of {ui.md(choice, code=True)}**: the source needs each of them (any order, names case-insensitive), no other"
        )
        ui.grid(
            ui.frame(
                [
                    {
                        "column": c.name,
                        "type": c.type,
                        "nullable": "no" if c.required else "yes",
                        "doc": c.doc,
                    }
                    for c in columns
                ],
                ["column", "type", "nullable", *(["doc"] if any(c.doc for c in columns) else [])],
            ),
            height=min(38 + 35 * len(columns), 420),
        )
        st.download_button(
            "Template CSV (header row)",
            template_csv(columns),
            file_name=f"{choice}.template.csv",
            mime="text/csv",
            icon=":material/download:",
            on_click="ignore",
            key="ingest_template",
        )


# A batch that spans tables: add the table to an open batch (its branch is named like the batch; its tables are
# reviewed and published together), start one, or none (a branch of its own, as always). ?batch= preselects an
# open batch (the batch Review's "ingest the rows that fix it" link), once per link.
def _valid_name(name: str) -> bool:
    try:
        validate_branch(name)
    except ValidationError:
        return False
    return True


batches = ui.open_batch_names()
q_batch = st.query_params.get("batch")
if q_batch is not None and st.session_state.get("ingest_batch_url") != q_batch:
    if q_batch in batches:
        st.session_state["ingest_batch"] = q_batch
    elif _valid_name(q_batch):  # a plain branch's name (Review's fix link): its batch starts with this ingest
        st.session_state["ingest_batch"] = NEW_BATCH
        st.session_state["ingest_batch_name"] = q_batch
st.session_state["ingest_batch_url"] = q_batch
batch_choice = st.selectbox(
    "Batch",
    [NO_BATCH, *batches, NEW_BATCH],
    key="ingest_batch",
    help="Add the table to an open batch that spans tables (its tables are reviewed and published together), "
    "or start a new one; the branch is then named like the batch",
)
with st.form("ingest"):
    upload = None
    server_path = ""
    if source_kind == "Upload a file":
        upload = st.file_uploader(
            "File (CSV, Parquet or JSON)",
            type=["csv", "parquet", "pq", "json", "jsonl", "ndjson"],
            disabled=not may_ingest.allowed,  # a viewer has nothing to upload (the core refuses anyway)
        )
    else:
        server_path = st.text_input(
            "Server-side path (file or glob)",
            placeholder="/data/incoming/flights_2013_03.csv",
            help="Only under the allowed ingest roots (WAP_INGEST_ROOTS)",
            key="ingest_path",
        )
        st.caption(f"Server-side paths must lie under: {ui.md(describe_roots(api.settings(ctx)))}")
    new_table = ""
    if choice == NEW:
        new_table = st.text_input(
            "New table name (namespace.table)", placeholder="demo.flights", key="ingest_new_table"
        )
    c3, c4 = st.columns(2)
    branch_in = ""
    batch_in = ""
    if batch_choice == NO_BATCH:
        branch_in = c3.text_input(
            "Branch name (optional)", placeholder="generated when empty", key="ingest_branch"
        )
    elif batch_choice == NEW_BATCH:
        batch_in = c3.text_input(
            "New batch name",
            placeholder="flights_2013_02_w2",
            key="ingest_batch_name",
            help="The branch of every table of the batch is named like it",
        )
    else:
        c3.caption(f"Branch: {ui.md(batch_choice, code=True)} (named like the batch)")
    fmt = c4.selectbox("Format", ["auto", "csv", "parquet", "json"], key="ingest_format")
    submitted = st.form_submit_button(
        "Ingest and audit",
        type="primary",
        disabled=not may_ingest.allowed,
        help=None if may_ingest.allowed else ui.md(may_ingest.message),
    )

PENDING = "ingest_pending"
CONFIRMED = (
    "ingest_anyway"  # the job "Ingest anyway" confirmed: run by the next run, with no warning above it
)
STEPS = {
    "reading": "Reading the source…",
    "writing": "Writing {rows} to a new branch…",
    "auditing": "Auditing {rows}…",
    "done": "Done: {rows} written and audited.",
}


@dataclass(frozen=True)
class _Job:
    """One ingest the page runs: its table, its source (a server path, or where an upload was saved), what the
    page calls the source (an upload's own name), the branch or batch, the format (None: by extension)."""

    table: str
    source: str
    shown: str
    branch: str | None
    batch: str | None
    fmt: str | None
    create: bool


@dataclass(frozen=True)
class _Pending:
    """A job held for the steward's word: its source was ingested into the table before (``duplicate``)."""

    job: _Job
    duplicate: Duplicate


def _as_shown(text: str, job: _Job) -> str:
    """``text`` (Markdown) naming an uploaded file by the name the steward gave it, never by the server's path
    under the uploads folder (where the console saved it)."""
    source, shown = job.source, job.shown
    if source == shown:
        return text
    for server, name in ((ui.md(source), ui.md(shown)), (source, shown)):
        text = text.replace(server, name)
    return text


def _run(job: _Job) -> None:
    """Ingest with live steps (reading → writing → auditing, with row counts as they become known)."""
    tid = TableId.parse(job.table)
    if not ui.wait_for_spark(ctx):
        return
    try:
        with st.status(f"Ingesting into {ui.md(tid)}…", expanded=True) as status:
            st.write(f"Source: {ui.md(job.shown, code=True)}")

            def progress(step: str, rows: int | None) -> None:
                text = STEPS.get(step, step).format(rows=ui.n_rows(rows))
                status.update(label=f"{ui.md(tid)}: {text}")
                st.write(f"{'✔' if step == 'done' else '›'} {text}")

            # confined: a server-side path is read only under the allowed ingest roots (and the uploads root)
            try:
                result = api.ingest(
                    ctx,
                    tid,
                    [job.source],
                    branch=job.branch,
                    batch=job.batch,
                    fmt=job.fmt,
                    create=job.create,
                    source_policy=SourcePolicy.CONFINED,
                    progress=progress,
                )
            except WapError as exc:
                # the status box ends on the refusal (one line); the error below lists every problem
                refusal = _as_shown(ui.md(first_line(mask_secrets(str(exc))).rstrip(":")), job)
                st.write(f"✘ Refused: {refusal}")
                status.update(label=f"{ui.md(tid)}: refused: {refusal}", state="error", expanded=True)
                raise
            status.update(
                label=f"Wrote {ui.n_rows(result.rows_written)} to {ui.md(tid)} · {ui.md(result.branch)}: audit {ui.md(result.audit.status)}",
                state="complete" if result.audit.passed else "error",
            )
    except WapError as exc:
        st.error(_as_shown(ui.error_text(exc), job))  # as ui.show_error, the upload by its own name
        return
    ui.writes_done()
    failed = result.audit.failed_checks
    (st.success if result.audit.passed else st.warning)(
        f"Branch **{ui.md(result.branch)}** of **{ui.md(tid)}**: {ui.n_rows(result.rows_written)} written, {result.malformed_rows:,} malformed, "
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
    if result.batch is not None:
        st.page_link(
            "pages/review.py",
            label=f"Review batch {ui.md(result.batch)} (every table, published together)",
            icon=":material/stacks:",
            query_params={"batch": result.batch},
        )


if submitted:
    st.session_state.pop(PENDING, None)
    try:
        if choice is None:
            raise ValidationError("choose the table to ingest into (or New table…)")
        create = choice == NEW
        tid = TableId.parse(new_table.strip() if create else choice)
        branch = validate_branch(branch_in.strip()) if branch_in.strip() else None
        batch: str | None = None
        if batch_choice == NEW_BATCH:
            if not batch_in.strip():
                raise ValidationError("give the new batch's name, or choose an open batch or none")
            batch = validate_branch(batch_in.strip())
        elif batch_choice != NO_BATCH:
            batch = validate_branch(str(batch_choice))
        if source_kind == "Upload a file":
            if upload is None:
                # (a file dropped just before the click may still be on its way: the browser submits the
                # form without it until its upload has begun; then the button waits for the upload)
                raise ValidationError(
                    "choose a file to upload, or switch to a server-side path "
                    "(a file shown above whose upload had not finished: click Ingest and audit again)"
                )
            # each upload in its own batch folder: two uploads of the same name never overwrite each other
            source = str(api.save_upload(ctx, upload.name, upload.getvalue()))
            shown = upload.name
        else:
            if not server_path.strip():
                raise ValidationError("give a server-side path, or switch to uploading a file")
            typed = server_path.strip()  # an s3a:// URL stays as typed (a Path would fold its '//')
            source = typed if is_url(typed) else str(Path(typed).expanduser())
            shown = source
        job = _Job(str(tid), source, shown, branch, batch, None if fmt == "auto" else fmt, create)
        duplicate = None
        if (
            not create and Path(source).is_file()
        ):  # metadata only: the same bytes already ingested into this table?
            duplicate = api.find_duplicate(ctx, tid, content_hash([source]))
        if duplicate is None:
            _run(job)
        else:
            st.session_state[PENDING] = _Pending(job, duplicate)
    except WapError as exc:
        ui.show_error(exc)

# "Ingest anyway" reruns the page first: its warning and buttons are gone when the ingest's status and result
# show, so neither stays above the result nor can a second click ingest the same rows again
anyway = st.session_state.pop(CONFIRMED, None)
if anyway:
    _run(anyway)

pending: _Pending | None = st.session_state.get(PENDING)
if pending:
    dup = pending.duplicate
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
        st.session_state[CONFIRMED] = pending.job
        st.rerun()
    elif d2.button("Cancel"):
        st.session_state.pop(PENDING, None)
        st.rerun()
