"""Render helpers of the review page: verdict, metadata diff, audit checks, Spark diff and charts."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from pages import _common as ui
from wap_core import api
from wap_core.api import (
    SMALL_CHANGE,
    AuditResult,
    ChangedRow,
    ChangeGroup,
    CheckGuide,
    CheckResult,
    ColumnChange,
    ColumnDiff,
    ColumnProfile,
    DiffResult,
    KeyedDiff,
    KeyedSamples,
    MetadataDiff,
    PublishCheck,
    change_groups,
    rank_changes,
)
from wap_core.api import check_key_columns as checks_key_columns
from wap_core.identifiers import TableId
from wap_core.states import BatchRead, BranchStatus, CheckStatus, branch_status
from wap_core.values import JsonObject

SIDE_COLORS = alt.Scale(domain=["main", "batch"], range=["#8c959f", "#1f6feb"])


# --------------------------------------------------------------------------- cached Spark work
def _acting(user: str | None) -> api.Context:
    """The context of a cached Spark read: its jobs run in ``user``'s FAIR pool (the viewer who missed the
    cache), else the environment's user's."""
    return api.open_context(ui.lakehouse(), signed_in=user)


@st.cache_data(ttl=600, show_spinner=False)
def cached_diff(table: str, branch: str, head: int | None, _user: str | None = None) -> DiffResult:
    """The Spark diff of ``branch`` at ``head`` (the head is part of the key: a new commit misses the cache),
    computed in ``_user``'s FAIR pool (the viewer who missed the cache; not part of the key)."""
    return api.compute_diff(_acting(_user), TableId.parse(table), branch)


@st.cache_data(ttl=600, show_spinner=False)
def cached_preview(table: str, branch: str, head: int | None, limit: int = 100) -> pd.DataFrame:
    return api.preview(_acting(None), TableId.parse(table), branch, limit=limit)


# --------------------------------------------------------------------------- verdict + metadata
def verdict(audit: AuditResult | None, head: int | None, ready: PublishCheck, meta: MetadataDiff) -> None:
    """The one-glance answer: status, and for a failed audit, which checks failed and how badly."""
    status = branch_status(head, audit)
    if audit is None:
        st.warning(
            "**Not audited yet.** Run the audit before this branch can be published.",
            icon=ui.STATUS_MATERIAL[BranchStatus.NOT_AUDITED],
        )
        return
    bad = [c for c in audit.checks if c.status.blocks_publish]
    warned = [c for c in audit.checks if c.status is CheckStatus.WARNED]
    rewrites = audit.changes is not None and audit.changes.method not in (
        BatchRead.APPEND,
        BatchRead.WHOLE_TABLE,
    )
    what = "inserted and updated rows" if rewrites else "new rows"
    line = (
        f"{len(audit.checks)} checks on {audit.rows_checked:,} {what} · audited {ui.short_time(audit.at)} "
        f"by {ui.md(audit.user)} at snapshot {audit.snapshot_id}"
    )
    if status is BranchStatus.STALE:
        st.warning(
            f"**Audit is stale:** the branch moved since it was audited (head {head}).  \n{line}",
            icon=ui.STATUS_MATERIAL[status],
        )
    elif status is BranchStatus.FAILED:
        names = ", ".join(f"**{ui.md(c.name)}**" for c in bad)
        st.error(
            f"**Audit failed — {len(bad)} of {len(audit.checks)} checks failed:** {names}  \n{line}",
            icon=ui.STATUS_MATERIAL[status],
        )
    elif status is BranchStatus.WARNED:
        st.warning(
            f"**Audit passed with warnings:** {ui.md(', '.join(c.name for c in warned))}  \n{line}",
            icon=ui.STATUS_MATERIAL[status],
        )
    else:
        st.success(f"**Audit passed.**  \n{line}", icon=ui.STATUS_MATERIAL[status])
    if rewrites:
        change_summary(audit)
    if meta.main_moved:
        st.info(
            "**Main moved since this branch forked:** rebase it onto current main, audit it again, then publish.",
            icon=":material/merge:",
        )


def change_summary(audit: AuditResult) -> None:
    """What a publish does to main's rows (a branch that updates, deletes or overwrites): inserted, updated,
    deleted, each with its share of main; a deletion is a warning box, impossible to miss."""
    c = audit.changes
    if c is None:
        return

    def share(n: int) -> str:
        pct = c.pct(n)
        return f" ({pct:.2f} % of main's {c.main_rows:,})" if pct is not None and c.main_rows else ""

    text = (
        f"**A publish changes main's rows:** inserts {c.inserted:,}, updates {c.updated:,}{share(c.updated)}, "
        f"deletes {c.deleted:,}{share(c.deleted)}"
    )
    how = {
        BatchRead.CHANGELOG: "read from the files the branch's commits added and removed",
        BatchRead.FULL_COMPARISON: f"compared whole with main at the fork: {ui.md(c.note)}",
    }.get(c.method, "")
    key = (
        f"by key {ui.md(', '.join(c.key))}"
        if c.key
        else "no key declared: an update counts as a delete and an insert"
    )
    caption = f"{how} · {key}"
    if c.deleted:
        st.warning(f"{text}  \n{caption}", icon=":material/delete_sweep:")
    else:
        st.info(f"{text}  \n{caption}", icon=":material/edit_note:")
    changed = c.inserted + 2 * c.updated + c.deleted
    st.page_link(
        "pages/explore.py",
        label=f"Open all {changed:,} changed rows in Explore (each with how it changed; download CSV)",
        icon=":material/table_view:",
        query_params={"table": audit.table, "branch": audit.branch, "check": api.CHANGED_ROWS},
    )


def metadata_summary(meta: MetadataDiff) -> None:
    cols = st.columns(6)
    cols[0].metric("Rows added", f"{meta.rows_added:,}")
    cols[1].metric("Rows deleted", f"{meta.rows_deleted:,}")
    cols[2].metric(
        "Files added",
        f"{meta.files_added:,}",
        delta=f"-{meta.files_deleted} deleted" if meta.files_deleted else None,
    )
    cols[3].metric(
        "Bytes added",
        ui.human_bytes(meta.bytes_added),
        delta=f"-{ui.human_bytes(meta.bytes_deleted)}" if meta.bytes_deleted else None,
    )
    cols[4].metric("Pure append", "yes" if meta.pure_append else "no")
    cols[5].metric("Main moved", "yes" if meta.main_moved else "no")
    st.caption(
        f"{meta.snapshots} commit(s) on the branch since fork snapshot {meta.fork_snapshot_id} · head {meta.head_snapshot_id}"
        f" · main {meta.main_snapshot_id} · from snapshot summaries only (no data read)"
    )


# --------------------------------------------------------------------------- audit
PROBLEM_COLUMNS = ("__problem", "__file", "__line", "__check")


def key_columns(audit: AuditResult) -> list[str]:
    """The table's key: the columns of its key-defining check(s) (``unique``), in suite order."""
    return checks_key_columns(audit.checks)


def failing_columns(c: CheckResult, columns: list[str]) -> list[str]:
    """The columns a check judges: its own, else (an expression) the columns its SQL, message or name mention."""
    if c.columns:
        return list(c.columns)
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f"{c.threshold} {c.message}"))
    return [col for col in columns if not col.startswith("__") and (col in words or col in c.name)]


def sample_order(columns: list[str], failing: list[str], key: list[str]) -> list[str]:
    """Failing-row sample columns: what is wrong (problem markers, the failing columns), then the key, then the rest."""
    first = [c for c in PROBLEM_COLUMNS if c in columns and c != "__check"]
    first += [c for c in failing if c in columns and c not in first]
    first += [c for c in key if c in columns and c not in first]
    return first + [c for c in columns if c not in first and c != "__check"]


def sample_frame(c: CheckResult, key: list[str]) -> tuple[pd.DataFrame, ui.ColumnConfigs]:
    """A failing-row sample with the failing columns first and pinned, so they are never cut off."""
    df = pd.DataFrame(c.sample)
    order = sample_order(list(df.columns), failing_columns(c, list(df.columns)), key)
    df = ui.texts_for_ids(df[order])
    failing = failing_columns(c, order)
    pinned = {x for x in order if x in failing or x in PROBLEM_COLUMNS}
    config: ui.ColumnConfigs = {col: st.column_config.Column(col, pinned=True) for col in pinned}
    return df, config


def _observed(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(
            f"{k.replace('_', ' ')} {v:,}" if isinstance(v, int) else f"{k.replace('_', ' ')} {v}"
            for k, v in value.items()
        )
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _check_row(c: CheckResult) -> dict[str, object]:
    return {
        "status": ui.status_badge(c.status),
        "check": c.name,
        "type": c.type,
        "columns": ", ".join(c.columns or []),
        "level": c.level.value,
        "observed": _observed(c.observed),
        "threshold": c.threshold or "",
        "failing rows": c.failing_rows,
        "message": c.message or "",
    }


def cross_table(c: CheckResult, guides: Mapping[str, CheckGuide]) -> bool:
    """True for a check that reads another table (a ``references``: the checks file names the table whose rows
    fix it), the checks a batch's Review shows first."""
    guide = guides.get(c.name)
    return guide.fixed_by is not None if guide is not None else c.type == "references"


def failing_checks(
    audit: AuditResult | None,
    table: str,
    branch: str,
    guides: Mapping[str, CheckGuide],
    *,
    only: Callable[[CheckResult], bool] | None = None,
    heading: str | None = "Failing checks",
    batch: str | None = None,
) -> None:
    """The evidence, right under the verdict: each failed or warned check with its failing-row sample, a link
    to ALL its failing rows in Explore, and, when another table's rows fix it (``references``), that table
    with a link to Ingest it chosen.

    ``only``: the checks to show (all by default); ``heading``: the section's title (none: no title);
    ``batch``: the batch that spans tables the branch belongs to; the Ingest link adds the fixing table's rows
    to it (a plain branch: to the batch of its name, which adopts it)."""
    if audit is None:
        return
    problems = sorted(
        (c for c in audit.checks if c.status is not CheckStatus.PASSED and (only is None or only(c))),
        key=lambda c: (c.status.rank, c.name),
    )
    if not problems:
        return
    if heading:
        st.markdown(f"#### {heading}")
    for c in problems:
        box = st.error if c.status.blocks_publish else st.warning
        failing = f"{c.failing_rows:,} failing rows" if c.failing_rows is not None else "no row count"
        box(
            f"**{ui.md(c.name)}** ({ui.md(c.type)}{' on ' + ui.md(', '.join(c.columns)) if c.columns else ''}) — **{ui.md(c.status)}**: "
            f"observed **{ui.md(_observed(c.observed))}** · threshold {ui.md(c.threshold or '-')} · **{failing}**  \n{ui.md(c.message)}",
            icon=ui.STATUS_MATERIAL.get(c.status),
        )
        guide = guides.get(c.name)
        if guide is not None and guide.fixed_by is not None:
            # the fixing rows join this branch's batch (a plain branch becomes a batch on first use, adopting
            # it): both tables are then audited and published together, and the check reads them there
            into = batch or branch
            st.markdown(
                f":material/build: **Fix:** the missing values belong in {ui.md(guide.fixed_by, code=True)}: "
                f"ingest their rows there in batch {ui.md(into, code=True)}, so both are published "
                "together, then re-run this audit."
            )
            st.page_link(
                "pages/ingest.py",
                label=f"Ingest into {ui.md(guide.fixed_by)} in batch {ui.md(into)}",
                icon=":material/upload:",
                query_params={"table": str(guide.fixed_by), "batch": into},
            )
        if guide is not None and guide.opens_rows and c.failing_rows:
            st.page_link(
                "pages/explore.py",
                label=f"Open all {c.failing_rows:,} failing rows of {ui.md(c.name)} in Explore (filter, download CSV)",
                icon=":material/table_view:",
                query_params={"table": table, "branch": branch, "check": c.name},
            )
        if c.sample:
            with st.expander(
                f"Failing-row sample of {ui.md(c.name)} ({len(c.sample)} rows)",
                expanded=c.status.blocks_publish,
            ):
                sample, config = sample_frame(c, key_columns(audit))
                ui.grid(sample, hide_index=True, width="stretch", column_config=config)


def audit_details(audit: AuditResult | None, head: int | None) -> None:
    """Every check of the audit in one table (failing first); the failing ones in detail are :func:`failing_checks`."""
    if audit is None:
        st.caption("No audit recorded for this branch.")
        return
    checks = sorted(audit.checks, key=lambda c: (c.status.rank, c.name))
    st.markdown(f"**All {len(checks)} checks** (failing first)")
    ui.grid(
        ui.style_status(pd.DataFrame([_check_row(c) for c in checks])),
        hide_index=True,
        width="stretch",
        height=38 + 35 * len(checks),
        column_config={"failing rows": ui.count_column("failing rows")},
    )


# --------------------------------------------------------------------------- Spark diff
def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 3)
    return v


def ranked(diff: DiffResult) -> list[tuple[ColumnDiff, ColumnChange]]:
    """Columns by what changed most (the standardized score shown with them), largest first."""
    by_name = {c.name: c for c in diff.columns}
    return [(by_name[ch.column], ch) for ch in rank_changes(diff.columns)]


def profile_table(columns: list[ColumnDiff], changes: dict[str, ColumnChange] | None = None) -> pd.DataFrame:
    """One row per column; min and max as text the way the console writes values (``1``, ``2400``,
    ``1348.331``: a whole number never with decimals), means with two decimals each (``1348.33``, ``3.00``)."""
    rows = []
    for col in columns:
        m, b = col.main, col.batch
        ch = (changes or {}).get(col.name)
        rows.append(
            {
                "column": col.name,
                "change": ch.score if ch else None,
                "moved": ch.aspect.replace("_", " ") if ch and ch.score >= SMALL_CHANGE else "",
                "null % main": _fmt(m.null_pct) if m else None,
                "null % batch": _fmt(b.null_pct),
                "distinct main": m.distinct if m else None,
                "distinct batch": b.distinct,
                "mean main": ui.mean_text(m.mean) if m else None,
                "mean batch": ui.mean_text(b.mean),
                "min main": ui.number_text(m.min) if m else None,
                "min batch": ui.number_text(b.min),
                "max main": ui.number_text(m.max) if m else None,
                "max batch": ui.number_text(b.max),
                "type": col.type,
                # which of main's figures are estimates (a sample, a sketch, a merge) rather than exact
                "approximate in main": ", ".join(f.replace("_", " ") for f in (m.approximate if m else ()))
                or None,
            }
        )
    return pd.DataFrame(rows)


_ASPECT_CELLS = {
    "null rate": ("null % main", "null % batch"),
    "distinct": ("distinct main", "distinct batch"),
    "distribution": ("mean main", "mean batch", "min main", "min batch", "max main", "max batch"),
}


def style_profile(df: pd.DataFrame) -> Any:
    """Highlight the cells of the measure that moved (amber), for columns whose change is at least small."""

    def paint(row: pd.Series) -> list[str]:
        cells = _ASPECT_CELLS.get(str(row.get("moved")), ())
        return [
            "background-color: #fff3cd; font-weight: 600"
            if c in cells or (c in ("column", "moved") and row.get("moved"))
            else ""
            for c in row.index
        ]

    return df.style.apply(paint, axis=1) if len(df) else df


PROFILE_CONFIG = {
    "column": st.column_config.TextColumn("column", pinned=True),
    "change": st.column_config.NumberColumn(
        "change", format="%.2f", help="standardized change (effect size): 0.2 small, 0.5 medium, 0.8 large"
    ),
    "moved": st.column_config.TextColumn("moved", help="the measure that moved most"),
    "null % main": st.column_config.NumberColumn("null % main", format="%.1f %%"),
    "null % batch": st.column_config.NumberColumn("null % batch", format="%.1f %%"),
    "distinct main": ui.count_column("distinct main"),
    "distinct batch": ui.count_column("distinct batch"),
}
# Chart values as the profile table writes them (ui.number_text): a whole number without decimals, at most 3.
NUMBER_FORMAT = ".3~f"


def _sides(col: ColumnDiff) -> list[tuple[str, ColumnProfile | None]]:
    return [("main", col.main), ("batch", col.batch)]


def null_rate_chart(col: ColumnDiff) -> alt.LayerChart:
    data = pd.DataFrame(
        [{"side": side, "null %": (p.null_pct if p else 0.0) or 0.0} for side, p in _sides(col)]
    )
    data["label"] = data["null %"].map(lambda v: f"{v:.1f} %")
    base = alt.Chart(data, title=f"{col.name}: null rate, main vs batch")
    side = alt.Y("side:N", sort=["main", "batch"], title=None)
    bars = base.mark_bar().encode(
        y=side,
        x=alt.X("null %:Q", title="null rows (%)"),
        color=alt.Color("side:N", scale=SIDE_COLORS, legend=None),
        tooltip=["side:N", alt.Tooltip("null %:Q", format=".2f")],
    )
    text = base.mark_text(align="left", dx=4).encode(y=side, x="null %:Q", text="label:N")
    # One band per side, sized by a step: a fixed height on a discrete axis collapses to zero in
    # Streamlit's chart container (both bars and labels on one line).
    layered: alt.LayerChart = (bars + text).properties(height=alt.Step(32))  # altair's builders return Any
    return layered


def null_rate_group_chart(cols: list[ColumnDiff]) -> alt.LayerChart:
    """The null rates of columns NULL on the same batch rows: one band per column, main and batch in it."""
    data = pd.DataFrame(
        [
            {
                "column": col.name,
                "side": side,
                "null %": (p.null_pct if p else 0.0) or 0.0,
                "null rows": p.nulls if p else 0,
            }
            for col in cols
            for side, p in _sides(col)
        ]
    )
    data["label"] = data["null %"].map(lambda v: f"{v:.1f} %")
    order = [c.name for c in cols]
    base = alt.Chart(data, title=f"null rate, main vs batch: {len(cols)} columns NULL on the same rows")
    y = alt.Y("column:N", sort=order, title=None)
    offset = alt.YOffset("side:N", sort=["main", "batch"])
    bars = base.mark_bar().encode(
        y=y,
        yOffset=offset,
        x=alt.X("null %:Q", title="null rows (%)"),
        color=alt.Color("side:N", scale=SIDE_COLORS),
        tooltip=[
            "column:N",
            "side:N",
            alt.Tooltip("null %:Q", format=".2f"),
            alt.Tooltip("null rows:Q", format=","),
        ],
    )
    text = base.mark_text(align="left", dx=4, fontSize=10).encode(
        y=y, yOffset=offset, x="null %:Q", text="label:N"
    )
    layered: alt.LayerChart = (bars + text).properties(
        height=alt.Step(14, **{"for": "offset"})
    )  # a band per column and side (see null_rate_chart)
    return layered


def numeric_chart(col: ColumnDiff) -> alt.Chart | None:
    rows = []
    for side, prof in _sides(col):
        for q, v in ((prof.quantiles if prof else None) or {}).items():
            if v is not None and q not in ("0.0", "1.0"):  # 5%..95%: the extremes flatten the chart
                rows.append({"side": side, "quantile": float(q), "value": float(v)})
    if not rows:
        return None
    whole = col.type in ("tinyint", "smallint", "int", "bigint")
    chart: alt.Chart = (  # altair's builders return Any
        alt.Chart(pd.DataFrame(rows), title=f"{col.name}: quantiles 5%–95%")
        .mark_line(point=True)
        .encode(
            x=alt.X("quantile:Q", axis=alt.Axis(format="%")),
            y=alt.Y(
                "value:Q",
                title=col.name,
                axis=alt.Axis(format="d", tickMinStep=1) if whole else alt.Axis(format=NUMBER_FORMAT),
            ),
            color=alt.Color("side:N", scale=SIDE_COLORS),
            tooltip=[
                "side:N",
                alt.Tooltip("quantile:Q", format=".0%"),
                alt.Tooltip("value:Q", format="d" if whole else NUMBER_FORMAT),
            ],
        )
        .properties(height=220)
    )
    return chart


def categorical_chart(col: ColumnDiff) -> alt.Chart | None:
    rows = []
    for side, prof in _sides(col):
        for tv in (prof.top_values if prof else None) or ():
            rows.append(
                {
                    "side": side,
                    "value": "∅ null" if tv.value is None else str(tv.value),
                    "pct": tv.pct,
                }
            )
    if not rows:
        return None
    chart: alt.Chart = (  # altair's builders return Any
        alt.Chart(pd.DataFrame(rows), title=f"{col.name}: top values (% of rows)")
        .mark_bar()
        .encode(
            y=alt.Y("value:N", sort="-x", title=None),
            x=alt.X("pct:Q", title="% of rows"),
            yOffset="side:N",
            color=alt.Color("side:N", scale=SIDE_COLORS),
            tooltip=["side", "value", alt.Tooltip("pct:Q", format=".2f")],
        )
        .properties(
            height=alt.Step(12, **{"for": "offset"})
        )  # a band per value and side (see null_rate_chart)
    )
    return chart


_WHAT = {
    "null_rate": "null rate",
    "distribution": "distribution",
    "top_values": "top values",
    "distinct": "distinct values",
}


def group_chart(diff: DiffResult, group: ChangeGroup) -> alt.Chart | alt.LayerChart | None:
    """The chart of one reason something moved, by the measure that moved (or that its failed check judges)."""
    cols = [c for c in (diff.column(n) for n in group.columns) if c is not None]
    if not cols:
        return None
    if group.aspect == "null_rate":
        return null_rate_group_chart(cols) if len(cols) > 1 else null_rate_chart(cols[0])
    if group.aspect == "distribution":
        return numeric_chart(cols[0])
    return categorical_chart(cols[0])


def chart_label(n: int, diff: DiffResult, group: ChangeGroup) -> str:
    """``Chart n · columns — measure (change s)``, then what ties the columns and the failed checks."""
    label = (
        f"Chart {n} · {ui.md(', '.join(group.columns))} — {_WHAT.get(group.aspect, group.aspect)} "
        f"(change {group.score:.2f})"
    )
    if group.same_rows:
        nulls = [c.batch.nulls for c in (diff.column(x) for x in group.columns) if c is not None]
        label += (
            f" · one cause: NULL on the same batch rows ({min(nulls):,}–{max(nulls):,} rows)"
            if min(nulls) != max(nulls)
            else f" · one cause: NULL on the same {nulls[0]:,} batch rows"
        )
    if group.checks:
        label += f" · failed: {ui.md(', '.join(group.checks))}"
    return label


def diff_details(diff: DiffResult, max_charts: int = 6, checks: Sequence[CheckResult] = ()) -> None:
    c = st.columns(4)
    c[0].metric("Rows added (counted)", f"{diff.rows_added:,}")
    c[1].metric("Rows deleted (counted)", f"{diff.rows_deleted:,}")
    c[2].metric("Schema changes", len(diff.schema_changes))
    c[3].metric("Columns profiled", len(diff.columns))
    if diff.schema_changes:
        st.warning("Schema changes against main:")
        ui.grid(pd.DataFrame(list(diff.schema_changes)), hide_index=True, width="stretch")
    # One chart per reason something moved, largest score first (the score its label states): null-rate
    # bars (one chart for columns NULL on the same rows), quantile lines, top-value shares; a column a
    # failed check judges is charted by that check's measure.
    charts: list[tuple[str, alt.Chart | alt.LayerChart]] = []
    for group in change_groups(diff, checks):
        if len(charts) >= max_charts:
            break
        chart = group_chart(diff, group)
        if chart is not None:
            charts.append((chart_label(len(charts) + 1, diff, group), chart))
    if charts:
        st.markdown("**Distributions, main vs batch** (what changed most first)")
        for row in range(0, len(charts), 2):  # numbered in reading order: left to right, then down
            cells = st.columns(2)
            for cell, (label, chart) in zip(cells, charts[row : row + 2], strict=False):
                with cell:
                    st.caption(label)
                    st.altair_chart(chart, width="stretch")
    else:
        st.markdown("**Distributions, main vs batch**: no column moved noticeably.")
    st.markdown(
        "**Per-column profile, main vs batch** (what changed most first; the measure that moved is highlighted)"
    )
    order = ranked(diff)
    prof = profile_table([col for col, _ in order], {ch.column: ch for _, ch in order})
    ui.grid(style_profile(prof), hide_index=True, width="stretch", column_config=PROFILE_CONFIG)
    source = diff.main_profile
    if source is not None and source.basis:
        st.caption(
            f"Main's profile ({ui.md(str(source.source or '').split(':')[0])}): {ui.md(source.basis)}. "
            "Figures listed under *approximate in main* are estimates; the others are exact."
        )


# --------------------------------------------------------------------------- keyed diff
@st.cache_data(ttl=600, show_spinner=False)
def cached_keyed(
    table: str, branch: str, head: int | None, key: tuple[str, ...], _user: str | None = None
) -> tuple[KeyedDiff, KeyedSamples]:
    """The keyed diff (counts, by ``key``) and a sample of each kind of change; the head is part of the cache key;
    computed in ``_user``'s FAIR pool (not part of the key)."""
    ctx, tid = _acting(_user), TableId.parse(table)
    counts = api.keyed_diff(ctx, tid, branch, list(key))
    samples = api.keyed_samples(ctx, tid, branch, list(key), limit=10)
    return counts, samples


def _changed_frame(rows: Sequence[ChangedRow], key: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """Changed rows: the key, then each changed column as ``old → new`` (blank where it did not change)."""
    changed_cols: list[str] = []
    for r in rows:
        changed_cols += [c.column for c in r.cells if c.column not in key and c.column not in changed_cols]
    out = []
    for r in rows:
        d = {k: ui.blank(r.key.get(k)) for k in key}
        for c in changed_cols:
            v = r.cell(c)
            d[c] = f"{ui.blank(v.old)} → {ui.blank(v.new)}" if v is not None else ""
        out.append(d)
    return pd.DataFrame(out, columns=[*key, *changed_cols]), changed_cols


def keyed_section(
    table: str, branch: str, head: int | None, columns: list[str], default_key: list[str]
) -> None:
    """Rows compared by key: added / removed / changed counts, a sample of each, changed cells old → new."""
    st.markdown("#### Rows by key (Spark)")
    with st.form("keyed_diff", border=False):
        key = st.multiselect(
            "Key columns",
            columns,
            default=[k for k in default_key if k in columns],
            help="From the table's unique check when it has one; choose others to compare by another key",
        )
        go = st.form_submit_button("Compare by key", icon=":material/compare_arrows:")
    if go:
        st.session_state["keyed_key"] = {"table": table, "branch": branch, "key": list(key)}
    chosen = st.session_state.get("keyed_key")
    if not chosen or chosen.get("table") != table or chosen.get("branch") != branch:
        st.caption(
            "Compare the branch with main row by row: rows whose key is new, gone, or whose values changed."
        )
        return
    if not chosen["key"]:
        st.error("Choose at least one key column.")
        return
    if not ui.wait_for_spark():
        return
    try:
        with st.spinner("Comparing rows by key with Spark…"):
            counts, samples = cached_keyed(table, branch, head, tuple(chosen["key"]), _user=ui.current_user())
    except Exception as exc:  # noqa: BLE001 - WapError and Spark analysis errors alike: shown, page goes on
        ui.show_error(exc)
        return
    s = counts.summary()
    c = st.columns(4)
    c[0].metric("Added", f"{s['added']:,}")
    c[1].metric("Removed", f"{s['removed']:,}")
    c[2].metric("Changed", f"{s['changed']:,}")
    c[3].metric("Changed cells", f"{s['changed_cells']:,}")
    st.caption(f"By key {ui.md(', '.join(chosen['key']))} · main at the fork vs the branch head")
    t_add, t_rem, t_chg = st.tabs(
        [f"Added ({s['added']:,})", f"Removed ({s['removed']:,})", f"Changed ({s['changed']:,})"]
    )
    key_config = {k: st.column_config.Column(k, pinned=True) for k in chosen["key"]}
    with t_add:
        _sample_rows(samples.added, key_config, "No added keys.")
    with t_rem:
        _sample_rows(samples.removed, key_config, "No removed keys.")
    with t_chg:
        if samples.changed:
            df, changed_cols = _changed_frame(list(samples.changed), chosen["key"])
            styled = df.style.map(
                lambda v: "background-color: #fff3cd; font-weight: 600" if v else "", subset=changed_cols
            )
            ui.grid(styled, hide_index=True, width="stretch", column_config=key_config)
        else:
            st.caption("No changed rows.")


def _sample_rows(rows: Sequence[JsonObject], key_config: ui.ColumnConfigs, none: str) -> None:
    """Sample rows as they are, the key pinned; ``none`` when there are none."""
    if rows:
        ui.grid(
            ui.texts_for_ids(pd.DataFrame(list(rows))),
            hide_index=True,
            width="stretch",
            column_config=key_config,
        )
    else:
        st.caption(none)
