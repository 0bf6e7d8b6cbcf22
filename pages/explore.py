"""Explore: any table at any ref (branch, tag, snapshot id or time): schema, snapshots, rows, read-only SQL;
on an audit branch, ALL the failing rows of one of its checks (a link from Review:
/explore?table=NS.TABLE&branch=NAME&check=CHECK), to read and download as CSV."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

import streamlit as st

from pages import _common as ui
from wap_core import api
from wap_core.exceptions import WapError
from wap_core.identifiers import MAIN, TableId

ui.page_header("Explore", "Read-only: browse a table as of any branch, tag, snapshot or point in time.")
ctx = ui.context()


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


def _param(name: str) -> str | None:
    """A URL parameter; ``branch=B`` (Review's links) stands for ``kind=branch&ref=B`` when those are absent."""
    q = st.query_params.get(name)
    b = st.query_params.get("branch")
    if q is None and b is not None and "ref" not in st.query_params:
        return {"kind": "branch", "ref": b}.get(name)
    return q


def _follow_url(key: str, param: str, options: list[str]) -> None:
    """The URL wins when it moved away from what this page wrote (a pasted link, the back/forward buttons).

    A parameter counts only when it equals one of ``options`` exactly (an allowlist): anything else is ignored.
    """
    q = _param(param)
    if q in options and q != st.session_state.get(_WROTE, {}).get(param):
        st.session_state[key] = q
    elif st.session_state.get(key) not in options:
        st.session_state.pop(key, None)


c1, c2, c3 = st.columns([2, 1, 2])
_follow_url("explore_table", "table", tables)
table = c1.selectbox("Table", tables, key="explore_table")
tid = TableId.parse(table)
try:
    tbl = api.table(ctx, tid)
except WapError as exc:
    ui.show_error(exc)
    st.stop()
refs = api.refs_of(tbl)
kinds = list(api.REF_KINDS)
_follow_url("explore_kind", "kind", kinds)
kind = c2.selectbox("Ref kind", kinds, key="explore_kind")
if kind in ("branch", "tag"):
    options = refs[kind]
    _follow_url(f"explore_{kind}", "ref", options)
    value: object = c3.selectbox(kind.capitalize(), options, key=f"explore_{kind}") if options else None
elif kind == "snapshot":
    snaps = api.snapshot_times(tbl)  # newest first
    ids = [snapshot_id for snapshot_id, _ in snaps]
    taken_ms = dict(snaps)
    q_snap = _param("ref")
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
        value=_param("ref") or datetime.now(UTC).isoformat(timespec="seconds"),
    )

if value is None:
    st.info(f"{ui.md(tid)} has no {ui.md(kind)}.")
    st.stop()
try:
    ref = api.resolve_ref(tbl, tid, kind, value)  # type: ignore[arg-type]
except WapError as exc:
    ui.show_error(exc)
    st.stop()
st.caption(
    f"Reading {ui.md(tid)} at {ui.md(ref.kind)} {ui.md(ref.value)} "
    f"(snapshot {ref.snapshot_id}, {ui.md(ui.local_time(ref.at))})"
)
# On an audit branch: the checks of the table's suite whose failing rows can be listed (the checks file's
# names, an allowlist: the URL's check= counts only when it is one of them, exactly).
check: str | None = None
if kind == "branch" and value != MAIN:
    try:
        guides = api.check_guides(ctx, tid)
    except WapError as exc:
        ui.show_error(exc)
        guides = {}
    # every row the branch changed (inserted, updated before and after, deleted) comes first, then the checks
    names = [api.CHANGED_ROWS, *(n for n, g in guides.items() if g.opens_rows)]
    q_check = st.query_params.get("check")
    if (
        q_check is not None
        and q_check not in names
        and q_check != st.session_state.get(_WROTE, {}).get("check")
    ):
        st.warning(
            f"{ui.md(tid)} has no check named {ui.md(repr(q_check))} whose failing rows can be listed: pick one below."
        )
    _follow_url("explore_check", "check", names)
    if names:
        picked = st.selectbox(
            "Changed rows, or failing rows of a check",
            ["(none)", *names],
            key="explore_check",
            help="(changed rows): every row the branch changed since its fork, `_wap_change` saying how "
            "(insert, update_before, update_after, delete). A check: every row of this branch's batch that fails it",
        )
        check = None if picked == "(none)" else picked

# The selection lives in the URL: a view can be shared, and the browser's back button returns to the previous one.
_state = {"table": table, "kind": kind, "ref": ui.id_text(value) if kind == "snapshot" else str(value)}
if check is not None:
    _state["check"] = check
_stale = [k for k in ("branch", "check") if k in st.query_params and k not in _state]
if _stale or any(st.query_params.get(k) != v for k, v in _state.items()):
    for k in _stale:
        del st.query_params[k]
    st.query_params.update(_state)
st.session_state[_WROTE] = _state

_FAILING = "explore_failing_rows"  # (what, handle) of the failing-rows read this session shows


def _failing_rows(branch: str, name: str, head: int) -> None:
    """ALL the failing rows of check ``name`` on ``branch`` (read by the core from the check's own spec),
    with Cancel while Spark reads them (and WAP_QUERY_TIMEOUT), then the rows and a CSV download."""
    changes = name == api.CHANGED_ROWS
    st.markdown(
        f"#### Rows changed on {ui.md(branch, code=True)}"
        if changes
        else f"#### Failing rows of {ui.md(name, code=True)} on {ui.md(branch, code=True)}"
    )
    what = (table, branch, name, head)
    shown = st.session_state.get(_FAILING)
    if shown is not None and shown[0] != what:
        shown[1].cancel()
        st.session_state.pop(_FAILING, None)
    if _FAILING not in st.session_state:
        if not ui.wait_for_spark(ctx):
            st.stop()
        try:
            st.session_state[_FAILING] = (
                what,
                api.submit_failing_rows(ctx, tid, branch, name, alive=_session_alive()),
            )
        except WapError as exc:
            ui.show_error(exc)
            return
    handle = st.session_state[_FAILING][1]
    if not handle.done():
        c_wait, c_cancel = st.columns([4, 1])
        waiting, cancel_slot = c_wait.empty(), c_cancel.empty()
        if cancel_slot.button("Cancel", icon=":material/cancel:", key="explore_failing_cancel"):
            handle.cancel()
        while not handle.done():
            waiting.info(
                f"Reading the failing rows with Spark… {handle.elapsed:.0f} s "
                f"(stopped after {api.settings(ctx).query_timeout:g} s)",
                icon=":material/hourglass_top:",
            )
            time.sleep(0.3)
        waiting.empty()
        cancel_slot.empty()
    try:
        got = handle.result(0)
    except WapError as exc:
        ui.show_error(exc)
        if st.button("Read them again", icon=":material/replay:", key="explore_failing_again"):
            st.session_state.pop(_FAILING, None)
            st.rerun()
        return
    more = " (the first ones: more rows fail; narrow the batch or use the SQL box)" if got.truncated else ""
    if changes:
        counts = got.rows["_wap_change"].value_counts() if len(got.rows) else {}
        told = ", ".join(
            f"{int(counts.get(k, 0)):,} {k}" for k in ("insert", "update_after", "update_before", "delete")
        )
        st.caption(
            f"**{len(got.rows):,} changed rows**{more.replace('rows fail', 'rows changed')} of {ui.md(branch)} since "
            f"its fork ({told}; head snapshot {ui.id_text(got.head)}): `_wap_change` says how each changed"
        )
    else:
        st.caption(
            f"**{len(got.rows):,} failing rows**{more} of the batch of {ui.md(branch)} (its rows since the fork, "
            f"head snapshot {ui.id_text(got.head)})"
        )
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{table}_{branch}_{'changes' if changes else name}").strip("_")
    st.download_button(
        "Download CSV",
        got.csv(),
        file_name=f"{slug}.csv",
        mime="text/csv",
        icon=":material/download:",
        on_click="ignore",
        key="explore_failing_csv",
    )
    ui.grid(ui.texts_for_ids(got.rows.copy()), height=420)


if check is not None:
    _failing_rows(str(value), check, ref.snapshot_id)

tab_schema, tab_snaps, tab_rows, tab_sql = st.tabs(["Schema", "Snapshots", "Rows", "SQL"])
with tab_schema:
    ui.grid(ui.frame(api.schema_rows(tbl, ref.snapshot_id)))
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
    columns = [r["column"] for r in api.schema_rows(tbl, ref.snapshot_id)]
    with st.form("rows"):
        f1, f2, f3, f4 = st.columns([2, 1, 2, 1])
        col_opts, op_opts = ["(none)", *columns], list(api.FILTER_OPS)
        q_col, q_op = st.query_params.get("col"), st.query_params.get("op")
        col = f1.selectbox("Filter column", col_opts, index=col_opts.index(q_col) if q_col in col_opts else 0)
        op = f2.selectbox("Operator", op_opts, index=op_opts.index(q_op) if q_op in op_opts else 0)
        val = f3.text_input("Value", value=st.query_params.get("val", ""))
        limit = f4.number_input("Rows", 1, api.MAX_ROWS, 200)
        go = st.form_submit_button("Show rows")
    if go:
        if col == "(none)":
            for k in ("col", "op", "val"):
                st.query_params.pop(k, None)
        else:
            st.query_params.update({"col": col, "op": op, "val": val})
        filters = [] if col == "(none)" else [(col, op, val)]
        try:
            if not ui.wait_for_spark(ctx):
                st.stop()
            with st.spinner("Reading rows with Spark…"):
                ui.grid(api.rows(ctx, tid, ref.snapshot_id, filters, int(limit)))
        except WapError as exc:
            ui.show_error(exc)
with tab_sql:
    st.caption(
        f"One read-only query over **`{api.VIEW}`** ({ui.md(tid)} at {ui.md(ref.kind)} {ui.md(ref.value)}): SELECT/WITH with joins, "
        "unions, windows and subqueries over it and its CTEs, built-in functions only; anything else is refused."
    )
    with st.form("sql"):
        sql = st.text_area("SQL", value=f"SELECT * FROM {api.VIEW} LIMIT 20", height=120)
        run = st.form_submit_button("Run query")
    # The query runs in a worker process of its own (WAP_QUERY_ISOLATION=process; or in the console's driver,
    # in this user's FAIR pool), stopped after WAP_QUERY_TIMEOUT; this run waits for it with a Cancel button.
    # A click (a rerun) interrupts the wait at its next update and cancels; another table/ref or a new query
    # cancels it; so does the end of this browser session (api.submit_query's alive()).
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
            if not ui.wait_for_spark(ctx):
                st.stop()
            st.session_state[_QUERY] = (
                where,
                api.submit_query(ctx, tid, ref.snapshot_id, sql, alive=_session_alive()),
            )
        except WapError as exc:
            ui.show_error(exc)
    if _QUERY in st.session_state:
        handle = st.session_state[_QUERY][1]
        if not handle.done():
            c_wait, c_cancel = st.columns([4, 1])
            waiting, cancel_slot = c_wait.empty(), c_cancel.empty()
            # the slot of the result, drawn now: it replaces the last query's result or error (a
            # "cancelled:" box) while this one runs, instead of leaving it under "Running" (an element,
            # not a container: a container drawn again at its place would keep the old one's content)
            outcome = st.empty()
            if cancel_slot.button("Cancel", icon=":material/cancel:", key="explore_sql_cancel"):
                handle.cancel()
            while not handle.done():
                waiting.info(
                    f"{_PHASES.get(handle.phase, 'Running with Spark…')} {handle.elapsed:.0f} s "
                    f"(stopped after {api.settings(ctx).query_timeout:g} s)",
                    icon=":material/hourglass_top:",
                )
                time.sleep(0.3)
            waiting.empty()
            cancel_slot.empty()
        else:
            outcome = st.empty()
        with outcome:
            try:
                answer = handle.result(0)
                own = api.column_names(tbl)
                ui.grid(
                    answer, hide_index=True, width="stretch", column_config=ui.computed_counts(answer, own)
                )
            except WapError as exc:
                ui.show_error(exc)
