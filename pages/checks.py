"""Checks: each table's suite (from the checks file) and its recent pass/fail record. No Spark."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from pages import _common as ui
from wap_core import api
from wap_core.api import AVAILABLE_CHECKS, StoredAudit, load_checks
from wap_core.states import CheckStatus


def _suite_row(
    check: str, kind: str, columns: tuple[str, ...], level: str, threshold: object, runs: list[StoredAudit]
) -> dict[str, object]:
    """One row of the suite table: the check, and how it fared in ``runs`` (newest first)."""
    statuses = [r.check_statuses[check] for r in runs if check in r.check_statuses]
    return {
        "check": check,
        "type": kind,
        "columns": ", ".join(columns),
        "level": level,
        "threshold": threshold,
        "runs": len(statuses),
        "passed": sum(s is CheckStatus.PASSED for s in statuses),
        "warned": sum(s is CheckStatus.WARNED for s in statuses),
        "failed": sum(s.blocks_publish for s in statuses),
        "last": ui.status_badge(statuses[0]) if statuses else "–",
    }


ui.page_header(
    "Checks", "The data-quality suite each table's batches must pass, and how they fared recently."
)
ctx = ui.context()
path = api.settings(ctx).checks_file
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
        shown = list(reversed(runs[:100]))  # oldest first, at most the 100 latest audits
        rows = [
            _suite_row(spec.name, spec.type, spec.columns, spec.level.value, spec.threshold, runs)
            for spec in suite.checks
        ]
        # Every check the record shows is listed: the built-in ones every ingested batch gets (malformed_rows),
        # and any the checks file no longer has.
        listed = {spec.name for spec in suite.checks}
        for check in dict.fromkeys(c for r in shown for c in r.check_statuses):
            if check in listed:
                continue
            cls = AVAILABLE_CHECKS.get(check)
            if cls is not None and cls.builtin:
                spec = cls(name=check)
                rows.append(
                    _suite_row(
                        check,
                        spec.type,
                        spec.columns,
                        spec.level.value,
                        f"{spec.threshold} (built in: every ingested batch)",
                        runs,
                    )
                )
            else:
                rows.append(_suite_row(check, "", (), "", "(no longer in the checks file)", runs))
        ui.grid(ui.style_status(pd.DataFrame(rows), "last"), hide_index=True, width="stretch")
        if runs:
            # The x axis names each audit by its branch (a branch audited again: "branch · 2", its 2nd audit).
            seen: dict[str, int] = {}
            labels = []
            for r in shown:
                seen[r.branch] = seen.get(r.branch, 0) + 1
                labels.append(r.branch if seen[r.branch] == 1 else f"{r.branch} · {seen[r.branch]}")
            long = pd.DataFrame(
                [
                    {
                        "audit": n + 1,
                        "batch": labels[n],
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
            checks_order = [str(row["check"]) for row in rows]
            present = [s for s in ui.STATUS_COLOR if s in set(long["status"])]
            chart = (
                alt.Chart(long)
                .mark_rect(stroke="white", strokeWidth=1)
                .encode(
                    x=alt.X(
                        "batch:N",
                        sort=labels,
                        title=f"audited branch (oldest → newest, {len(shown)} audit{'s' if len(shown) != 1 else ''})",
                        # every column labelled (none dropped for overlap): steep, and cut with an ellipsis
                        axis=alt.Axis(labelAngle=-60, labelLimit=160, labelOverlap=False),
                    ),
                    y=alt.Y("check:N", sort=checks_order, title=None, axis=alt.Axis(labelLimit=320)),
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
            # an explicit element height: one readable row per check whatever the number of audits (1..100),
            # and room for the branch names under the axis
            st.altair_chart(chart, width="stretch", height=26 * int(long["check"].nunique()) + 200)
            if any(" · " in label for label in labels):
                st.caption(
                    "A branch audited more than once has a column per audit: `branch · 2` is its 2nd audit."
                )
        else:
            st.caption("No audits recorded for this table yet.")
    other = sorted({r.table for r in record} - set(suites))
    if other:
        st.caption(f"Audited tables without a suite in the checks file: {ui.md(', '.join(other))}")
