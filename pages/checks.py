"""Checks: each table's suite (from the checks file) and its recent pass/fail record. No Spark."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from pages import _common as ui
from wap_core.checks import load_checks
from wap_core.states import CheckStatus

ui.page_header(
    "Checks", "The data-quality suite each table's batches must pass, and how they fared recently."
)
lh = ui.lakehouse()
path = lh.settings.checks_file
st.caption(f"Checks file: {ui.md(path, code=True)}")

with ui.wap_errors():
    suites = load_checks(path) if path.exists() else {}
    if not suites:
        st.info(
            f"No suites: {ui.md(path)} is missing or empty. Every batch then passes on built-in checks only."
        )
    record = ui.audit_record(limit=2000)
    for name in sorted(suites):
        suite = suites[name]
        st.subheader(ui.md(name))
        runs = [r for r in record if r.table == name]
        rows = []
        for spec in suite.checks:
            statuses = [r.check_statuses[spec.name] for r in runs if spec.name in r.check_statuses]
            rows.append(
                {
                    "check": spec.name,
                    "type": spec.type,
                    "columns": ", ".join(spec.columns),
                    "level": spec.level.value,
                    "threshold": spec.threshold,
                    "runs": len(statuses),
                    "passed": sum(s is CheckStatus.PASSED for s in statuses),
                    "warned": sum(s is CheckStatus.WARNED for s in statuses),
                    "failed": sum(s.blocks_publish for s in statuses),
                    "last": ui.status_badge(statuses[0]) if statuses else "–",
                }
            )
        ui.grid(ui.style_status(pd.DataFrame(rows), "last"), hide_index=True, width="stretch")
        if runs:
            shown = list(reversed(runs[:100]))  # oldest first, at most the 100 latest audits
            long = pd.DataFrame(
                [
                    {
                        "audit": n + 1,
                        "at": r.at.isoformat(),
                        "when": ui.local_time(r.at.isoformat()),
                        "branch": r.branch,
                        "snapshot": ui.id_text(r.snapshot_id),
                        "check": c,
                        "status": s.value,
                    }
                    for n, r in enumerate(shown)
                    for c, s in r.check_statuses.items()
                ]
            )
            present = [s for s in ui.STATUS_COLOR if s in set(long["status"])]
            chart = (
                alt.Chart(long)
                .mark_rect(stroke="white", strokeWidth=1)
                .encode(
                    x=alt.X(
                        "audit:O",
                        title=f"audit (oldest → newest, {len(shown)} shown)",
                        axis=alt.Axis(
                            labelAngle=0,
                            values=[
                                n
                                for n in range(1, len(shown) + 1)
                                if len(shown) <= 20 or n % 10 == 0 or n == 1
                            ],
                        ),
                    ),
                    y=alt.Y("check:N", title=None, axis=alt.Axis(labelLimit=320)),
                    color=alt.Color(
                        "status:N",
                        scale=alt.Scale(domain=present, range=[ui.STATUS_COLOR[s] for s in present]),
                        legend=alt.Legend(title="outcome"),
                    ),
                    tooltip=[
                        "when:N",
                        alt.Tooltip("at:N", title="ISO time"),
                        "branch:N",
                        "snapshot:N",
                        "check:N",
                        "status:N",
                    ],
                )
                .properties(height=26 * long["check"].nunique(), title="Recent audits")
            )
            # an explicit element height: one readable row per check whatever the number of audits (1..100)
            st.altair_chart(chart, width="stretch", height=26 * int(long["check"].nunique()) + 110)
        else:
            st.caption("No audits recorded for this table yet.")
    other = sorted({r.table for r in record} - set(suites))
    if other:
        st.caption(f"Audited tables without a suite in the checks file: {ui.md(', '.join(other))}")
