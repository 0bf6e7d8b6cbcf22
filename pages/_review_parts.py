"""Render helpers of the review page: verdict, metadata diff, audit checks, Spark diff and charts."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from pages import _common as ui
from wap_core import TableId
from wap_core.audit import AuditResult
from wap_core.catalog import MetadataDiff
from wap_core.checks import CheckResult
from wap_core.publish import PublishCheck

_ORDER = {"error": 0, "failed": 1, "warned": 2, "passed": 3}
SIDE_COLORS = alt.Scale(domain=["main", "batch"], range=["#8c959f", "#1f6feb"])


# --------------------------------------------------------------------------- cached Spark work
@st.cache_data(ttl=600, show_spinner=False)
def cached_diff(table: str, branch: str, head: int | None) -> dict[str, Any]:
    """The Spark diff of ``branch`` at ``head`` (the head is part of the key: a new commit misses the cache)."""
    from wap_core.diff import compute_diff

    return compute_diff(ui.lakehouse(), TableId.parse(table), branch).to_dict()


@st.cache_data(ttl=600, show_spinner=False)
def cached_preview(table: str, branch: str, head: int | None, limit: int = 100) -> pd.DataFrame:
    from wap_core.diff import preview

    return preview(ui.lakehouse(), TableId.parse(table), branch, limit=limit)


# --------------------------------------------------------------------------- verdict + metadata
def verdict(audit: AuditResult | None, head: int | None, ready: PublishCheck, meta: MetadataDiff) -> None:
    """The one-glance answer: status, and for a failed audit, which checks failed and how badly."""
    if audit is None:
        st.warning("**Not audited yet.** Run the audit before this branch can be published.", icon=ui.STATUS_MATERIAL["not_audited"])
        return
    stale = audit.snapshot_id != head
    bad = [c for c in audit.checks if c.status in ("failed", "error")]
    warned = [c for c in audit.checks if c.status == "warned"]
    line = (f"{len(audit.checks)} checks on {audit.rows_checked:,} new rows · audited {ui.short_time(audit.at)} "
            f"by {ui.md(audit.user)} at snapshot {audit.snapshot_id}")
    if stale:
        st.warning(f"**Audit is stale:** the branch moved since it was audited (head {head}).  \n{line}", icon=ui.STATUS_MATERIAL["stale"])
    elif bad:
        names = ", ".join(f"**{ui.md(c.name)}**" for c in bad)
        st.error(f"**Audit failed — {len(bad)} of {len(audit.checks)} checks failed:** {names}  \n{line}", icon=ui.STATUS_MATERIAL["failed"])
    elif warned:
        st.warning(f"**Audit passed with warnings:** {ui.md(', '.join(c.name for c in warned))}  \n{line}", icon=ui.STATUS_MATERIAL["warned"])
    else:
        st.success(f"**Audit passed.**  \n{line}", icon=ui.STATUS_MATERIAL["passed"])
    if meta.main_moved:
        st.info("**Main moved since this branch forked:** rebase it onto current main, audit it again, then publish.", icon=":material/merge:")


def metadata_summary(meta: MetadataDiff) -> None:
    cols = st.columns(6)
    cols[0].metric("Rows added", f"{meta.rows_added:,}")
    cols[1].metric("Rows deleted", f"{meta.rows_deleted:,}")
    cols[2].metric("Files added", f"{meta.files_added:,}", delta=f"-{meta.files_deleted} deleted" if meta.files_deleted else None)
    cols[3].metric("Bytes added", ui.human_bytes(meta.bytes_added),
                   delta=f"-{ui.human_bytes(meta.bytes_deleted)}" if meta.bytes_deleted else None)
    cols[4].metric("Pure append", "yes" if meta.pure_append else "no")
    cols[5].metric("Main moved", "yes" if meta.main_moved else "no")
    st.caption(f"{meta.snapshots} commit(s) on the branch since fork snapshot {meta.fork_snapshot_id} · head {meta.head_snapshot_id}"
               f" · main {meta.main_snapshot_id} · from snapshot summaries only (no data read)")


# --------------------------------------------------------------------------- audit
def _observed(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k.replace('_', ' ')} {v:,}" if isinstance(v, int) else f"{k.replace('_', ' ')} {v}" for k, v in value.items())
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _check_row(c: CheckResult) -> dict[str, Any]:
    return {
        "status": ui.status_badge(c.status), "check": c.name, "type": c.type, "columns": ", ".join(c.columns or []),
        "level": c.level, "observed": _observed(c.observed), "threshold": c.threshold or "",
        "failing rows": c.failing_rows, "message": c.message or "",
    }


def audit_details(audit: AuditResult | None, head: int | None) -> None:
    if audit is None:
        st.caption("No audit recorded for this branch.")
        return
    checks = sorted(audit.checks, key=lambda c: (_ORDER.get(c.status, 9), c.name))
    problems = [c for c in checks if c.status != "passed"]
    for c in problems:
        box = st.error if c.status in ("failed", "error") else st.warning
        failing = f"{c.failing_rows:,} failing rows" if c.failing_rows is not None else "no row count"
        box(f"**{ui.md(c.name)}** ({ui.md(c.type)}{' on ' + ui.md(', '.join(c.columns)) if c.columns else ''}) — **{ui.md(c.status)}**: "
            f"observed **{ui.md(_observed(c.observed))}** · threshold {ui.md(c.threshold or '-')} · **{failing}**  \n{ui.md(c.message)}",
            icon=ui.STATUS_MATERIAL.get(c.status))
        if c.sample:
            with st.expander(f"Failing-row sample of {ui.md(c.name)} ({len(c.sample)} rows)", expanded=c.status in ("failed", "error")):
                st.dataframe(pd.DataFrame(c.sample), hide_index=True, width="stretch")
    st.markdown(f"**All {len(checks)} checks** (failing first)")
    st.dataframe(ui.style_status(pd.DataFrame([_check_row(c) for c in checks])), hide_index=True, width="stretch", height=38 + 35 * len(checks),
                 column_config={"failing rows": st.column_config.NumberColumn("failing rows", format="%d")})


# --------------------------------------------------------------------------- Spark diff
def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 3)
    return v


def profile_table(columns: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for col in columns:
        m, b = col.get("main") or {}, col["batch"]
        rows.append({
            "column": col["name"], "type": col["type"],
            "null % main": _fmt(m.get("null_pct")), "null % batch": _fmt(b.get("null_pct")),
            "distinct main": m.get("distinct"), "distinct batch": b.get("distinct"),
            "min main": str(m.get("min")) if m.get("min") is not None else None, "min batch": str(b.get("min")) if b.get("min") is not None else None,
            "max main": str(m.get("max")) if m.get("max") is not None else None, "max batch": str(b.get("max")) if b.get("max") is not None else None,
            "mean main": _fmt(m.get("mean")), "mean batch": _fmt(b.get("mean")),
        })
    return pd.DataFrame(rows)


def numeric_chart(col: dict[str, Any]) -> alt.Chart | None:
    rows = []
    for side in ("main", "batch"):
        prof = col.get(side) or {}
        for q, v in (prof.get("quantiles") or {}).items():
            if v is not None and q not in ("0.0", "1.0"):  # 5%..95%: the extremes flatten the chart
                rows.append({"side": side, "quantile": float(q), "value": float(v)})
    if not rows:
        return None
    return (
        alt.Chart(pd.DataFrame(rows), title=f"{col['name']}: quantiles 5%–95%")
        .mark_line(point=True)
        .encode(x=alt.X("quantile:Q", axis=alt.Axis(format="%")), y=alt.Y("value:Q", title=col["name"]),
                color=alt.Color("side:N", scale=SIDE_COLORS), tooltip=["side", "quantile", "value"])
        .properties(height=220)
    )


def categorical_chart(col: dict[str, Any]) -> alt.Chart | None:
    rows = []
    for side in ("main", "batch"):
        for tv in (col.get(side) or {}).get("top_values") or []:
            rows.append({"side": side, "value": "∅ null" if tv["value"] is None else str(tv["value"]), "pct": tv["pct"]})
    if not rows:
        return None
    return (
        alt.Chart(pd.DataFrame(rows), title=f"{col['name']}: top values (% of rows)")
        .mark_bar()
        .encode(y=alt.Y("value:N", sort="-x", title=None), x=alt.X("pct:Q", title="% of rows"), yOffset="side:N",
                color=alt.Color("side:N", scale=SIDE_COLORS), tooltip=["side", "value", "pct"])
        .properties(height=220)
    )


def _shift(col: dict[str, Any]) -> float:
    """How much a column moved between main and the batch (for picking which charts to show first)."""
    m, b = col.get("main") or {}, col["batch"]
    score = abs((b.get("null_pct") or 0) - (m.get("null_pct") or 0))
    if m.get("mean") is not None and b.get("mean") is not None:
        scale = abs(m["mean"]) or 1.0
        score += 100 * abs(b["mean"] - m["mean"]) / scale
    return score


def diff_details(diff: dict[str, Any], max_charts: int = 4) -> None:
    c = st.columns(4)
    c[0].metric("Rows added (counted)", f"{diff['rows_added']:,}")
    c[1].metric("Rows deleted (counted)", f"{diff['rows_deleted']:,}")
    c[2].metric("Schema changes", len(diff["schema_changes"]))
    c[3].metric("Columns profiled", len(diff["columns"]))
    if diff["schema_changes"]:
        st.warning("Schema changes against main:")
        st.dataframe(pd.DataFrame(diff["schema_changes"]), hide_index=True, width="stretch")
    st.markdown("**Per-column profile, main vs batch**")
    st.dataframe(profile_table(diff["columns"]), hide_index=True, width="stretch")
    # Distributions worth a chart: numeric columns that vary within the batch, categorical ones with few values.
    numeric = sorted((c for c in diff["columns"] if c["kind"] == "numeric" and (c["batch"].get("distinct") or 0) >= 10),
                     key=_shift, reverse=True)[:max_charts]
    categorical = sorted((c for c in diff["columns"] if c["kind"] == "categorical" and 1 < (c["batch"].get("distinct") or 0) <= 50),
                         key=_shift, reverse=True)[:max_charts]
    charts = [ch for ch in [*(numeric_chart(c) for c in numeric), *(categorical_chart(c) for c in categorical)] if ch is not None]
    if charts:
        st.markdown("**Distributions, main vs batch** (columns that moved most first)")
        grid = st.columns(2)
        for i, ch in enumerate(charts):
            with grid[i % 2]:
                st.altair_chart(ch, width="stretch")
