"""``drift: {column, warn, fail}``: a column's distribution in the batch against main's stored profile.

The measure is the population stability index, PSI = sum over bins of (b - m) * ln(b / m), with
main's shares m and the batch's shares b (each floored at 1e-4):

- numbers: six bins cut at main's 5/25/50/75/95 % quantiles (main's shares are then 5, 20, 25, 25,
  20, 5 %; equal cut points are merged), over the non-NULL values;
- strings, booleans, dates: main's top values plus "other", over all rows (NULL is a value).

The batch's shares come from the one pass (one ``count_if`` per bin); main's from its profile
stored at the batch's fork (``wap_profiles``, cached or merged after publishes): no scan of main.
When main has no stored profile at the fork yet, the check passes with a note (a review of any
branch of the table stores it). ``warn`` (default 0.1) and ``fail`` (default 0.25) are the usual
PSI rules of thumb: above ``fail`` the check fails (or warns at ``level: warn``), above ``warn`` it warns.
The total variation distance (half the sum of |b - m|) is reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckResult, CheckSpec, MainContext, Measurement, sql_literal
from wap_core.identifiers import quote_column
from wap_core.states import CheckStatus

EPS = 1e-4
_CUTS = ("0.05", "0.25", "0.5", "0.75", "0.95")


@dataclass(frozen=True, kw_only=True)
class Drift(CheckSpec):
    """The column's distribution stays close to main's: population stability index (PSI) below warn/fail."""

    type: ClassVar[str] = "drift"
    judge_fields: ClassVar[tuple[str, ...]] = ("warn_at", "fail_at")
    warn_at: float | None = 0.1
    fail_at: float | None = 0.25

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        col = args.one_column()
        warn = args.number("warn", 0.1, minimum=0)
        fail = args.number("fail", 0.25, minimum=0)
        if warn is not None and fail is not None and warn > fail:
            raise args.fail("drift: warn is greater than fail")
        return [args.spec(cls, f"drift({col})", (col,), warn_at=warn, fail_at=fail)]

    @property
    def threshold(self) -> str:
        parts = [
            f"warn > {self.warn_at:g}" if self.warn_at is not None else "",
            f"fail > {self.fail_at:g}" if self.fail_at is not None else "",
        ]
        return "PSI vs main: " + ", ".join(p for p in parts if p)

    # ----- what main looks like ------------------------------------------------------------
    def _main(self, ctx: MainContext | None) -> tuple[str, list[Any], list[float]] | None:
        """(kind, bin definition, main's shares) from main's stored profile, or None."""
        if ctx is None or ctx.stored is None:
            return None
        prof = ctx.stored.main_profile()
        col = prof.column(self.columns[0]) if prof is not None else None
        if col is None or not col.rows:
            return None
        if col.kind == "numeric" and col.quantiles:
            q = col.quantiles
            cuts: list[tuple[float, float]] = []  # (cut value, share of main below it)
            for p in _CUTS:
                if q.get(p) is None:
                    continue
                v = float(q[p])
                if cuts and cuts[-1][0] == v:
                    continue  # merged: the share below stays the lowest level's (values tie at the cut)
                cuts.append((v, float(p)))
            edges = [c for c, _ in cuts]
            below = [0.0] + [s for _, s in cuts] + [1.0]
            shares = [max(b - a, 0.0) for a, b in pairwise(below)]
            return "numeric", edges, shares
        if col.top_values:
            rows = float(col.rows)
            values = [tv.value for tv in col.top_values]
            shares = [tv.count / rows for tv in col.top_values]
            return "categorical", values, [*shares, max(1.0 - sum(shares), 0.0)]
        return None

    def reads(self, ctx: MainContext) -> tuple[Any, ...]:
        return ("main-profile", ctx.fork_snapshot_id)

    def aggregates(self, ctx: MainContext | None) -> dict[str, str]:
        main = self._main(ctx)
        if main is None:
            return {}
        kind, defs, _ = main
        c = quote_column(self.columns[0])
        if kind == "numeric":
            x = f"CAST({c} AS DOUBLE)"
            lows: list[str | None] = [None, *[repr(float(e)) for e in defs]]
            highs: list[str | None] = [*[repr(float(e)) for e in defs], None]
            out = {}
            for i, (lo, hi) in enumerate(zip(lows, highs, strict=False)):
                conds = [
                    f"{x} >= {lo}" if lo is not None else f"{x} IS NOT NULL",
                    f"{x} < {hi}" if hi is not None else "",
                ]
                out[f"bin{i}"] = f"count_if({' AND '.join(p for p in conds if p)})"
            return out
        s = f"CAST({c} AS STRING)"
        return {
            f"bin{i}": (f"count_if({s} IS NULL)" if v is None else f"count_if({s} = {sql_literal(str(v))})")
            for i, v in enumerate(defs)
        }

    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        main = self._main(ctx)
        if main is None:
            where = (
                f"at snapshot {ctx.fork_snapshot_id}"
                if ctx.fork_snapshot_id is not None
                else "(the table has no main yet)"
            )
            return self.result(
                True,
                None,
                None,
                f"no stored profile of main {where} with column {self.columns[0]}: "
                "drift not judged (a review of a branch of this table stores main's profile)",
            )
        kind, defs, expected = main
        counts = [
            int(m.get(f"bin{i}") or 0) for i in range(len(expected) - (1 if kind == "categorical" else 0))
        ]
        rows = int(m.get("_rows") or 0)
        if kind == "categorical":
            counts.append(max(rows - sum(counts), 0))
        total = sum(counts)
        if total == 0:
            return self.result(
                True, None, None, f"no non-null {self.columns[0]} in the batch: drift not judged"
            )
        actual = [n / total for n in counts]
        psi = sum(
            (max(b, EPS) - max(a, EPS)) * math.log(max(b, EPS) / max(a, EPS))
            for a, b in zip(expected, actual, strict=False)
        )
        tvd = 0.5 * sum(abs(b - a) for a, b in zip(expected, actual, strict=False))
        labels = (
            (
                [f"< {defs[0]:g}" if defs else "all"]
                + [f"[{a:g}, {b:g})" for a, b in pairwise(defs)]
                + ([f">= {defs[-1]:g}"] if defs else [])
            )
            if kind == "numeric"
            else [*map(str, defs), "other"]
        )
        observed = {
            "psi": round(psi, 4),
            "tvd": round(tvd, 4),
            "bins": [
                {"bin": lbl, "main": round(a, 4), "batch": round(b, 4)}
                for lbl, a, b in zip(labels, expected, actual, strict=False)
            ],
        }
        failed = self.fail_at is not None and psi > self.fail_at
        warned = self.warn_at is not None and psi > self.warn_at
        msg = f"PSI {psi:.3f} (TVD {tvd:.3f}) of {self.columns[0]} vs main at snapshot {ctx.fork_snapshot_id}"
        if failed:
            return self.result(False, observed, None, msg + f": drifted (> {self.fail_at:g})")
        res = self.result(
            True, observed, None, msg + (f": shifting (> {self.warn_at:g})" if warned else ": stable")
        )
        if warned:
            res.status = CheckStatus.WARNED
        return res
