"""Explore: any table at any ref (branch, tag, snapshot id or time): schema, snapshots, rows, read-only SQL."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import streamlit as st

from pages import _common as ui
from wap_core import TableId
from wap_core.analysis import explore as ex
from wap_core.exceptions import WapError

ui.page_header("Explore", "Read-only: browse a table as of any branch, tag, snapshot or point in time.")
lh = ui.lakehouse()
user = ui.current_user(lh)


def _session_alive() -> Callable[[], bool] | None:
    """True while this browser session is connected (Streamlit's runtime: thread-safe, per its source)."""
    from streamlit.runtime import Runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None or not Runtime.exists():
        return None
    runtime, session_id = Runtime.instance(), ctx.session_id
    return lambda: runtime.is_active_session(session_id)


tables = ui.table_names()
if not tables:
    st.info("No tables yet.")
    st.stop()

_WROTE = "explore_url"  # the selection this page last wrote to the URL


def _follow_url(key: str, param: str, options: list[str]) -> None:
    """The URL wins when it moved away from what this page wrote (a pasted link, the back/forward buttons)."""
    q = st.query_params.get(param)
    if q in options and q != st.session_state.get(_WROTE, {}).get(param):
        st.session_state[key] = q
    elif st.session_state.get(key) not in options:
        st.session_state.pop(key, None)


c1, c2, c3 = st.columns([2, 1, 2])
_follow_url("explore_table", "table", tables)
table = c1.selectbox("Table", tables, key="explore_table")
tid = TableId.parse(table)
try:
    tbl = lh.table(tid)
except WapError as exc:
    ui.show_error(exc)
    st.stop()
refs = ex.refs_of(tbl)
kinds = list(ex.REF_KINDS)
_follow_url("explore_kind", "kind", kinds)
kind = c2.selectbox("Ref kind", kinds, key="explore_kind")
if kind in ("branch", "tag"):
    options = refs[kind]
    _follow_url(f"explore_{kind}", "ref", options)
    value: object = c3.selectbox(kind.capitalize(), options, key=f"explore_{kind}") if options else None
elif kind == "snapshot":
    snaps = sorted(tbl.metadata.snapshots, key=lambda s: -s.timestamp_ms)
    ids = [s.snapshot_id for s in snaps]
    taken_ms = {s.snapshot_id: s.timestamp_ms for s in snaps}
    q_snap = st.query_params.get("ref")
    value = c3.selectbox(
        "Snapshot",
        ids,
        index=next((i for i, x in enumerate(ids) if str(x) == q_snap), 0),
        format_func=lambda i: (
            f"{ui.id_text(i)} · {ui.local_time(datetime.fromtimestamp(taken_ms[i] / 1000, tz=UTC))}"
        ),
    )
else:
    value = c3.text_input(
        "Time on main (ISO 8601, UTC)",
        value=st.query_params.get("ref") or datetime.now(UTC).isoformat(timespec="seconds"),
    )

if value is None:
    st.info(f"{ui.md(tid)} has no {ui.md(kind)}.")
    st.stop()
try:
    ref = ex.resolve_ref(tbl, tid, kind, value)  # type: ignore[arg-type]
except WapError as exc:
    ui.show_error(exc)
    st.stop()
st.caption(
    f"Reading {ui.md(tid)} at {ui.md(ref.kind)} {ui.md(ref.value)} "
    f"(snapshot {ref.snapshot_id}, {ui.md(ui.local_time(ref.at))})"
)
# The selection lives in the URL: a view can be shared, and the browser's back button returns to the previous one.
_state = {"table": table, "kind": kind, "ref": ui.id_text(value) if kind == "snapshot" else str(value)}
if any(st.query_params.get(k) != v for k, v in _state.items()):
    st.query_params.update(_state)
st.session_state[_WROTE] = _state

tab_schema, tab_snaps, tab_rows, tab_sql = st.tabs(["Schema", "Snapshots", "Rows", "SQL"])
with tab_schema:
    ui.grid(ui.frame(ex.schema_rows(tbl, ref.snapshot_id)))
with tab_snaps:
    ref_name = ref.value if kind in ("branch", "tag") else "main"
    tl = ui.timeline(table, ref_name)
    df = ui.frame(
        tl,
        ["at", "snapshot_id", "parent_id", "operation", "added_records", "total_records", "user", "source"],
    )
    df = ui.times_for_display(df, "at")
    st.caption(f"Ancestry of {ui.md(ref_name)}, newest first")
    ui.grid(
        df,
        column_config={
            "snapshot_id": st.column_config.TextColumn("snapshot"),
            "parent_id": st.column_config.TextColumn("parent"),
            "added_records": ui.count_column("added records"),
            "total_records": ui.count_column("total records"),
        },
    )
with tab_rows:
    columns = [r["column"] for r in ex.schema_rows(tbl, ref.snapshot_id)]
    with st.form("rows"):
        f1, f2, f3, f4 = st.columns([2, 1, 2, 1])
        col_opts, op_opts = ["(none)", *columns], list(ex.FILTER_OPS)
        q_col, q_op = st.query_params.get("col"), st.query_params.get("op")
        col = f1.selectbox("Filter column", col_opts, index=col_opts.index(q_col) if q_col in col_opts else 0)
        op = f2.selectbox("Operator", op_opts, index=op_opts.index(q_op) if q_op in op_opts else 0)
        val = f3.text_input("Value", value=st.query_params.get("val", ""))
        limit = f4.number_input("Rows", 1, ex.MAX_ROWS, 200)
        go = st.form_submit_button("Show rows")
    if go:
        if col == "(none)":
            for k in ("col", "op", "val"):
                st.query_params.pop(k, None)
        else:
            st.query_params.update({"col": col, "op": op, "val": val})
        filters = [] if col == "(none)" else [(col, op, val)]
        try:
            if not ui.wait_for_spark(lh):
                st.stop()
            with st.spinner("Reading rows with Spark…"):
                ui.grid(ex.rows(lh, tid, ref.snapshot_id, filters, int(limit), user=user))
        except WapError as exc:
            ui.show_error(exc)
with tab_sql:
    st.caption(
        f"One read-only query over **`{ex.VIEW}`** ({ui.md(tid)} at {ui.md(ref.kind)} {ui.md(ref.value)}): SELECT/WITH with joins, "
        "unions, windows and subqueries over it and its CTEs, built-in functions only; anything else is refused."
    )
    with st.form("sql"):
        sql = st.text_area("SQL", value=f"SELECT * FROM {ex.VIEW} LIMIT 20", height=120)
        run = st.form_submit_button("Run query")
    # The query runs in a worker process of its own (WAP_QUERY_ISOLATION=process; or in the console's driver,
    # in this user's FAIR pool), stopped after WAP_QUERY_TIMEOUT; this run waits for it with a Cancel button.
    # A click (a rerun) interrupts the wait at its next update and cancels; another table/ref or a new query
    # cancels it; so does the end of this browser session (ex.submit_query's alive()).
    _QUERY = "explore_sql_query"
    _PHASES = {
        "waiting": "Waiting for a free query worker…",
        "starting": "Starting a Spark worker for the query…",
        "running": "Running with Spark…",
    }
    where = (table, ref.snapshot_id)
    shown = st.session_state.get(_QUERY)
    if shown is not None and (run or shown[0] != where):
        shown[1].cancel()
        st.session_state.pop(_QUERY, None)
    if run:
        try:
            if not ui.wait_for_spark(lh):
                st.stop()
            st.session_state[_QUERY] = (
                where,
                ex.submit_query(lh, tid, ref.snapshot_id, sql, user=user, alive=_session_alive()),
            )
        except WapError as exc:
            ui.show_error(exc)
    if _QUERY in st.session_state:
        handle = st.session_state[_QUERY][1]
        if not handle.done():
            c_wait, c_cancel = st.columns([4, 1])
            waiting, cancel_slot = c_wait.empty(), c_cancel.empty()
            if cancel_slot.button("Cancel", icon=":material/cancel:", key="explore_sql_cancel"):
                handle.cancel()
            while not handle.done():
                waiting.info(
                    f"{_PHASES.get(handle.phase, 'Running with Spark…')} {handle.elapsed:.0f} s "
                    f"(stopped after {lh.settings.query_timeout:g} s)",
                    icon=":material/hourglass_top:",
                )
                time.sleep(0.3)
            waiting.empty()
            cancel_slot.empty()
        try:
            answer = handle.result(0)
            own = [f.name for f in tbl.schema().fields]
            ui.grid(answer, hide_index=True, width="stretch", column_config=ui.computed_counts(answer, own))
        except WapError as exc:
            ui.show_error(exc)
