"""``removed_rows`` / ``changed_rows: {max, max_pct}``: how much of main a publish removes or rewrites.

A branch written by a job that updates, deletes or overwrites rows changes main beyond what it adds:
``removed_rows`` limits the rows of main a publish deletes (no new version of their key),
``changed_rows`` the rows it deletes or replaces (deleted + updated). ``max`` is a row count,
``max_pct`` a percentage of main's rows at the fork; either or both. Measured from the audit's
change counts (:class:`wap_core.lake.batch.ChangeCounts`, one Spark job over the changed files,
none for an append), judged from thresholds only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckResult, CheckSpec, MainContext, Measurement

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True, kw_only=True)
class RemovedRows(CheckSpec):
    """The rows of main a publish deletes are within ``max`` rows and ``max_pct`` % of main."""

    type: ClassVar[str] = "removed_rows"
    judge_fields: ClassVar[tuple[str, ...]] = ("max", "max_pct")
    what: ClassVar[str] = "deletes"
    max: int | None = None
    max_pct: float | None = None

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        mx = args.number("max", integer=True, minimum=0)
        pct = args.number("max_pct", minimum=0)
        if mx is None and pct is None:
            raise args.fail(f"{cls.type}: give max and/or max_pct")
        if pct is not None and pct > 100:
            raise args.fail(f"{cls.type}: max_pct is a percentage (0 to 100)")
        return [args.spec(cls, cls.type, (), max=mx, max_pct=None if pct is None else float(pct))]

    @property
    def threshold(self) -> str:
        parts = [f"max {self.max:,} rows" if self.max is not None else "", ""]
        if self.max_pct is not None:
            parts[1] = f"max {self.max_pct:g}% of main"
        return ", ".join(p for p in parts if p)

    def reads(self, ctx: MainContext) -> tuple[Any, ...]:
        return ("changes", ctx.fork_snapshot_id, ctx.head_snapshot_id)

    def counted(self, m: Measurement) -> int:
        """The rows this check limits, from the measurement."""
        return int(m.get("deleted") or 0)

    def measure_more(self, m: Measurement, batch: DataFrame, ctx: MainContext) -> Measurement:
        c = ctx.changes
        if c is None:
            return {**m, "deleted": 0, "updated": 0, "main_rows": None, "method": None}
        return {
            **m,
            "deleted": c.deleted,
            "updated": c.updated,
            "main_rows": c.main_rows,
            "method": str(c.method),
        }

    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        n = self.counted(m)
        main_rows = m.get("main_rows")
        pct = 100.0 * n / int(main_rows) if main_rows else None
        ok = (self.max is None or n <= self.max) and (
            self.max_pct is None or pct is None or pct <= self.max_pct
        )
        of_main = f" ({pct:.2f}% of main's {int(main_rows):,})" if pct is not None and main_rows else ""
        msg = f"a publish {self.what} {n:,} rows of main{of_main}"
        observed = {"rows": n, "pct_of_main": None if pct is None else round(pct, 4)}
        return self.result(ok, observed, n, msg)


@dataclass(frozen=True, kw_only=True)
class ChangedRows(RemovedRows):
    """The rows of main a publish deletes or replaces are within ``max`` rows and ``max_pct`` % of main."""

    type: ClassVar[str] = "changed_rows"
    what: ClassVar[str] = "deletes or rewrites"

    def counted(self, m: Measurement) -> int:
        return int(m.get("deleted") or 0) + int(m.get("updated") or 0)
