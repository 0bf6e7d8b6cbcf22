"""``freshness: {column, max_age}``: the newest value is at most ``max_age`` old (s, m, h, d, w)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckResult, CheckSpec, MainContext, Measurement
from wap_core.durations import parse_duration
from wap_core.identifiers import quote_column


@dataclass(frozen=True, kw_only=True)
class Freshness(CheckSpec):
    """The newest value of a timestamp column is at most ``max_age`` old."""

    type: ClassVar[str] = "freshness"
    judge_fields: ClassVar[tuple[str, ...]] = ("max_age", "max_age_seconds")
    max_age: str
    max_age_seconds: float

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        col = args.one_column("timestamp column")
        max_age = args.pop("max_age")
        try:
            seconds = parse_duration(str(max_age)).total_seconds()
        except ValueError as exc:
            raise args.fail(f"freshness: {exc}") from exc
        return [args.spec(cls, f"freshness({col})", (col,), max_age=str(max_age), max_age_seconds=seconds)]

    @property
    def threshold(self) -> str:
        return f"newest within {self.max_age}"

    def aggregates(self, ctx: MainContext | None) -> dict[str, str]:
        # The newest value is measured; its age is judged against the clock at judging time, so a
        # cached measurement stays right as time passes.
        c = quote_column(self.columns[0])
        return {
            "newest": f"CAST(max({c}) AS STRING)",
            "newest_epoch": f"unix_timestamp(CAST(max({c}) AS TIMESTAMP))",
        }

    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        newest, epoch = m.get("newest"), m.get("newest_epoch")
        if newest is None or epoch is None:
            return self.result(False, None, None, "no non-null value to measure freshness")
        age = time.time() - float(epoch)
        ok = age <= float(self.max_age_seconds)
        hours = float(age) / 3600.0
        return self.result(
            ok,
            {"newest": newest, "age_hours": round(hours, 2)},
            None,
            f"newest value {newest} is {hours:.1f} h old (max {self.max_age})",
        )
