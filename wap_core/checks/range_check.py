"""``range: {column, min, max}``: every non-NULL value within [min, max]; observed min and max too.

(The module is not called ``range`` so that it never shadows the builtin in an import.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckSpec, MainContext, Measurement, RowCheck, jsonable, sql_literal
from wap_core.identifiers import quote_column


@dataclass(frozen=True, kw_only=True)
class Range(RowCheck):
    """Every non-null value of the column lies in [min, max]."""

    type: ClassVar[str] = "range"
    min: float | None = None
    max: float | None = None

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        col = args.one_column()
        mn, mx = args.pop("min"), args.pop("max")
        for label, v in (("min", mn), ("max", mx)):
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise args.fail(f"range: {label} must be a number")
        if mn is None and mx is None:
            raise args.fail("range: give min and/or max")
        if mn is not None and mx is not None and mn > mx:
            raise args.fail("range: min is greater than max")
        return [args.spec(cls, f"range({col})", (col,), min=mn, max=mx)]

    @property
    def threshold(self) -> str:
        return f"[{self.min}, {self.max}], <= {self.max_failing_rows} failing rows"

    def fail_sql(self) -> str:
        c = quote_column(self.columns[0])
        parts = [
            f"{c} < {sql_literal(self.min)}" if self.min is not None else "",
            f"{c} > {sql_literal(self.max)}" if self.max is not None else "",
        ]
        return f"{c} IS NOT NULL AND ({' OR '.join(p for p in parts if p)})"

    def aggregates(self, ctx: MainContext | None) -> dict[str, str]:
        c = quote_column(self.columns[0])
        return {**super().aggregates(ctx), "min": f"min({c})", "max": f"max({c})"}

    def observed(self, m: Measurement, failing: int) -> Any:
        return {"failing_rows": failing, "min": jsonable(m.get("min")), "max": jsonable(m.get("max"))}
