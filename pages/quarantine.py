"""Quarantine: what a quarantine kept, per table: /quarantine?table=NS.TABLE&batch=NAME (a deep link).

Per table (the tables that have a quarantine table ``<ns>.<table>__quarantine``): its batches (published or
still open), the rows per check, and the rows themselves, filterable by batch and check, downloadable as
CSV or Parquet (the same file ``wap quarantine export`` writes). Reads through Spark
(:mod:`wap_core.workflow.quarantine_view`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar, cast

import pandas as pd
import streamlit as st

from pages import _common as ui
from pages import _quarantine_parts as qp
from wap_core import api
from wap_core.exceptions import WapError
from wap_core.identifiers import TableId

ALL = "All"
ROW_LIMIT = 1000
T = TypeVar("T")


def _kept(key: tuple[object, ...], read: Callable[[], T]) -> T:
    """``read()``'s result, kept in the session while ``key`` (the quarantine table's refs, the filters) is
    the same: a change of filter or a rerun does not read the quarantine table with Spark again."""
    slot = st.session_state.setdefault("_quarantine_reads", {})
    if key not in slot:
        if len(slot) > 8:
            slot.clear()
        slot[key] = read()
    return cast(T, slot[key])


ui.page_header(
    "Quarantine",
    "The rows a quarantine moved out of a failed batch, with why: per table, batch and check. They publish with "
    "their batch; download them to fix and ingest again.",
)
ctx = ui.context()

tables = sorted(name.removesuffix(qp.SUFFIX) for name in ui.table_names() if qp.is_quarantine_table(name))
if not tables:
    st.info(
        "Nothing was quarantined yet. Quarantine the failing rows of a failed batch from its Review "
        "(or `wap quarantine TABLE BRANCH --reason TEXT`)."
    )
    st.stop()

q_table, q_batch = st.query_params.get("table"), st.query_params.get("batch")
if q_table in tables and st.session_state.get("quarantine_table_url") != (q_table, q_batch):
    st.session_state["quarantine_table"] = q_table
    st.session_state["quarantine_batch"] = q_batch or ALL
    st.session_state["quarantine_table_url"] = (q_table, q_batch)
table_name = st.selectbox("Table", tables, key="quarantine_table")
try:
    tid = TableId.parse(table_name)
except WapError as exc:
    ui.show_error(exc)
    st.stop()
st.caption(f"Quarantine table {ui.md(str(tid) + qp.SUFFIX, code=True)}")

if not ui.wait_for_spark(ctx):
    st.stop()


try:
    heads = api.quarantine_heads(ctx, tid)
    with st.spinner("Reading the quarantine table with Spark…"):
        summary = _kept(("summary", str(tid), heads), lambda: api.quarantine_summary(ctx, tid))
except WapError as exc:
    ui.show_error(exc)
    st.stop()

st.markdown(f"#### Batches · {summary.rows:,} rows kept")
if not summary.batches:
    st.info(f"No rows of {ui.md(tid)} are quarantined.")
    st.stop()
batches = pd.DataFrame(
    [
        {
            "batch": b.batch,
            "rows": b.rows,
            "state": "published" if b.published else "open (publishes with its batch)",
        }
        for b in summary.batches
    ]
)
ui.grid(batches, counts=("rows",), hide_index=True, width="stretch")
st.markdown("#### Rows per check")
st.caption("A row failing two checks counts in both.")
ui.grid(
    pd.DataFrame(
        [
            {"batch": g.batch, "check": g.check, "rows": g.rows, "published": g.published}
            for g in summary.groups
        ]
    ),
    counts=("rows",),
    hide_index=True,
    width="stretch",
)

st.markdown("#### Rows")
names = list(dict.fromkeys(b.batch for b in summary.batches))
if st.session_state.get("quarantine_batch") not in (ALL, *names):
    st.session_state["quarantine_batch"] = ALL
c1, c2 = st.columns(2)
batch_choice = c1.selectbox("Batch", [ALL, *names], key="quarantine_batch")
check_choice = c2.selectbox("Check", [ALL, *summary.checks], key="quarantine_check")
batch = None if batch_choice == ALL else batch_choice
check = None if check_choice == ALL else check_choice
try:
    with st.spinner("Reading the rows…"):
        got = _kept(
            ("rows", str(tid), heads, batch, check),
            lambda: api.quarantine_rows(ctx, tid, batch=batch, check=check, limit=ROW_LIMIT),
        )
except WapError as exc:
    ui.show_error(exc)
    st.stop()
more = f" (the first {len(got.frame):,}, newest first)" if got.truncated else ""
st.caption(f"**{got.total:,} rows**{more}")
slug = re.sub(r"[^A-Za-z0-9._-]+", "_", "_".join(filter(None, [str(tid), batch, check, "quarantine"])))


def _export(fmt: str) -> Callable[[], bytes]:
    """The file's bytes, made when the button is clicked (one Spark read), not on every run of the page."""
    return lambda: api.quarantine_export_bytes(ctx, tid, fmt=fmt, batch=batch, check=check)


d1, d2, _ = st.columns([1, 1, 3])
for col, fmt, mime in ((d1, "csv", "text/csv"), (d2, "parquet", "application/vnd.apache.parquet")):
    col.download_button(
        f"Download {fmt.upper() if fmt == 'csv' else 'Parquet'}",
        _export(fmt),
        file_name=f"{slug}.{fmt}",
        mime=mime,
        icon=":material/download:",
        on_click="ignore",
        key=f"quarantine_download_{fmt}",
    )
ui.grid(ui.texts_for_ids(got.frame.copy()), hide_index=True, width="stretch", height=420)
