"""``row_count: {min, max}``: the batch's row count within bounds (thresholds only: judged from the cache)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckResult, CheckSpec, MainContext, Measurement


@dataclass(frozen=True, kw_only=True)
class RowCount(CheckSpec):
    """The batch's row count is within [min, max]."""

    type: ClassVar[str] = "row_count"
    judge_fields: ClassVar[tuple[str, ...]] = ("min", "max")
    min: int | None = None
    max: int | None = None

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        mn, mx = args.pop("min"), args.pop("max")
        for label, v in (("min", mn), ("max", mx)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise args.fail(f"row_count: {label} must be a non-negative integer")
        if mn is None and mx is None:
            raise args.fail("row_count: give min and/or max")
        if mn is not None and mx is not None and mn > mx:
            raise args.fail("row_count: min is greater than max")
        return [args.spec(cls, "row_count", (), min=mn, max=mx)]

    @property
    def threshold(self) -> str:
        parts = [
            f"min {self.min}" if self.min is not None else "",
            f"max {self.max}" if self.max is not None else "",
        ]
        return ", ".join(p for p in parts if p)

    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        rows = int(m.get("_rows") or 0)
        ok = (self.min is None or rows >= self.min) and (self.max is None or rows <= self.max)
        return self.result(ok, rows, None, f"batch has {rows:,} rows")
