"""``anomaly: {metric, column, threshold, min_history, window}``: a batch metric against the table's history.

The metric (``row_count``; ``null_pct``, ``distinct`` or ``mean`` of a column) is measured in the
one pass over the batch and compared with the same metric of the last ``window`` (alias
``history``) published batches of the table, i.e. the batches whose heads are ancestors of main at
this batch's fork (their metrics are recorded at each audit, see ``wap_batch_metrics``; profiles a
review computed count too). No scan of main.

Robust z-score: ``z = (value - median) / scale`` with ``scale = max(1.4826 * MAD, 0.1 * |median|,
min_scale)``. 1.4826 * MAD estimates the standard deviation of normal data while ignoring outliers
in the history; the floor of 10 % of the median keeps a very steady history (MAD near 0, e.g. the
same row count every day) from flagging ordinary small changes; ``min_scale`` (default 0) sets an
absolute floor. If the scale is still 0 (a constant history of zeros), any other value is flagged.
The check fails when ``|z| > threshold`` (default 4). With fewer than ``min_history`` (default 5)
published values it passes with a note: never a false alarm on a young table.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckResult, CheckSpec, MainContext, Measurement
from wap_core.identifiers import quote_column
from wap_core.values import JsonObject

METRICS = ("row_count", "null_pct", "distinct", "mean")
MAD_TO_SIGMA = 1.4826
RELATIVE_FLOOR = 0.1


@dataclass(frozen=True, kw_only=True)
class Anomaly(CheckSpec):
    """A batch metric stays within ``max_z`` robust z-scores of the recent published batches."""

    type: ClassVar[str] = "anomaly"
    judge_fields: ClassVar[tuple[str, ...]] = ("max_z", "min_history", "window", "min_scale")
    metric: str
    max_z: float = 4.0  # YAML ``threshold``
    min_history: int = 5
    window: int = 30
    min_scale: float = 0.0

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        metric = args.pop("metric")
        if metric not in METRICS:
            raise args.fail(f"anomaly: metric must be one of {', '.join(METRICS)}, not {metric!r}")
        cols = args.columns(required=metric != "row_count")
        if metric == "row_count" and cols:
            raise args.fail("anomaly: row_count takes no column")
        if len(cols) > 1:
            raise args.fail("anomaly: give exactly one column")
        threshold = args.number("threshold", 4.0, minimum=0)
        min_history = args.number("min_history", 5, integer=True, minimum=1)
        window = args.number("window", None, integer=True, minimum=1)
        history = args.number("history", None, integer=True, minimum=1)
        if window is not None and history is not None and window != history:
            raise args.fail("anomaly: give window or history (the same thing), not both")
        window = window or history or 30
        if window < min_history:
            raise args.fail(f"anomaly: window ({window}) is smaller than min_history ({min_history})")
        min_scale = args.number("min_scale", 0.0, minimum=0)
        key = metric_key(metric, cols[0] if cols else None)
        return [
            args.spec(
                cls,
                f"anomaly({key})",
                cols,
                metric=metric,
                max_z=float(threshold),
                min_history=int(min_history),
                window=int(window),
                min_scale=float(min_scale),
            )
        ]

    @property
    def key(self) -> str:
        """The key of the metric in the stored batch metrics (metric, and column if any)."""
        return metric_key(self.metric, self.columns[0] if self.columns else None)

    @property
    def threshold(self) -> str:
        return (
            f"|robust z| <= {self.max_z:g} vs the last {self.window} published batches "
            f"(at least {self.min_history})"
        )

    def aggregates(self, ctx: MainContext | None) -> dict[str, str]:
        if self.metric == "row_count":
            return {}
        c = quote_column(self.columns[0])
        return {
            "null_pct": {"nn": f"count({c})"},
            "distinct": {"distinct": f"approx_count_distinct({c})"},
            "mean": {"mean": f"avg(CAST({c} AS DOUBLE))"},
        }[self.metric]

    def history_metric(self, m: Measurement) -> tuple[str, float] | None:
        value = self.value(m)
        return None if value is None else (self.key, value)

    def value(self, m: Measurement) -> float | None:
        """The batch's metric from its measurement."""
        rows = int(m.get("_rows") or 0)
        if self.metric == "row_count":
            return float(rows)
        if self.metric == "null_pct":
            return 100.0 * (rows - int(m.get("nn") or 0)) / rows if rows else None
        v = m.get(self.metric)
        return float(v) if v is not None else None

    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        value = self.value(m)
        if value is None:
            return self.result(
                True, None, None, f"{self.key}: no value in this batch (no non-null rows); not judged"
            )
        history = ctx.stored.metric_history(self.key, self.window) if ctx.stored is not None else []
        observed: JsonObject = {"value": round(value, 6), "history": len(history)}
        if len(history) < self.min_history:
            return self.result(
                True,
                observed,
                None,
                f"{self.key} = {value:g}; only {len(history)} published batches with this metric "
                f"(needs {self.min_history}): not judged yet",
            )
        z, median, scale = robust_z(value, history, self.min_scale)
        observed.update(
            {
                "median": round(median, 6),
                "scale": round(scale, 6),
                "z": round(z, 3) if math.isfinite(z) else str(z),
            }
        )
        ok = abs(z) <= self.max_z
        verdict = "anomalous" if not ok else "within the usual range"
        return self.result(
            ok,
            observed,
            None,
            f"{self.key} = {value:g} vs median {median:g} of the last {len(history)} published batches "
            f"(scale {scale:g}): robust z {z:+.1f}, {verdict}",
        )


def metric_key(metric: str, column: str | None) -> str:
    """The name a batch metric is stored under: ``row_count`` or ``null_pct(col)``, ``distinct(col)``, ``mean(col)``."""
    return metric if column is None else f"{metric}({column})"


def robust_z(value: float, history: list[float], min_scale: float = 0.0) -> tuple[float, float, float]:
    """(z, median, scale) of ``value`` against ``history`` (see the module doc for the scale)."""
    median = statistics.median(history)
    mad = statistics.median([abs(x - median) for x in history])
    scale = max(MAD_TO_SIGMA * mad, RELATIVE_FLOOR * abs(median), min_scale)
    if scale == 0:
        return (0.0 if value == median else float("inf") * (1 if value > median else -1)), median, 0.0
    return (value - median) / scale, median, scale
