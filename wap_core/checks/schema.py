"""``schema: {columns: {name: type}, allow_extra}``: the batch's columns and types (analysis only, no job)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckResult, CheckSpec, MainContext, Measurement
from wap_core.values import Record

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_ALIASES = {
    "integer": "int",
    "long": "bigint",
    "short": "smallint",
    "byte": "tinyint",
    "str": "string",
    "text": "string",
    "bool": "boolean",
    "float64": "double",
    "real": "float",
}


def _norm_type(t: str) -> str:
    t = t.strip().lower()
    return _ALIASES.get(t, t)


@dataclass(frozen=True, kw_only=True)
class Schema(CheckSpec):
    """The batch's columns (and types) are as expected; extra columns only if ``allow_extra``."""

    type: ClassVar[str] = "schema"
    expected: tuple[tuple[str, str | None], ...]
    allow_extra: bool = False

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        spec = args.pop("columns")
        allow_extra = args.pop("allow_extra", False)
        if isinstance(spec, list) and all(isinstance(c, str) for c in spec):
            spec = dict.fromkeys(spec)
        if not isinstance(spec, Mapping) or not spec:
            raise args.fail("schema: 'columns' must map column names to types (or list names)")
        expected = tuple((str(k), str(v).lower() if v is not None else None) for k, v in spec.items())
        return [
            args.spec(
                cls, "schema", tuple(k for k, _ in expected), expected=expected, allow_extra=bool(allow_extra)
            )
        ]

    @property
    def args(self) -> Record:
        return {"columns": dict(self.expected), "allow_extra": self.allow_extra}

    @property
    def threshold(self) -> str:
        return "columns " + ", ".join(f"{k}:{v}" if v else k for k, v in self.expected)

    def reads(self, ctx: MainContext) -> tuple[Any, ...]:
        return ("schema-of-batch",)

    def measure_more(self, m: Measurement, batch: DataFrame, ctx: MainContext) -> Measurement:
        return {
            **m,
            "actual": {f.name.lower(): f.dataType.simpleString().lower() for f in batch.schema.fields},
        }

    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        actual: Mapping[str, str] = m.get("actual") or {}
        problems: list[str] = []
        for name, typ in self.expected:
            got = actual.get(name.lower())
            if got is None:
                problems.append(f"missing column {name}")
            elif typ is not None and _norm_type(typ) != _norm_type(got):
                problems.append(f"column {name} is {got}, expected {typ}")
        if not self.allow_extra:
            extra = sorted(set(actual) - {k.lower() for k, _ in self.expected})
            problems += [f"unexpected column {c}" for c in extra]
        msg = "; ".join(problems) if problems else "schema as expected"
        return self.result(not problems, problems or "as expected", None, msg)
