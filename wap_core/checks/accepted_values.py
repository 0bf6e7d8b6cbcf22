"""``accepted_values: {column, values}``: every non-NULL value is one of ``values``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckSpec, RowCheck, sql_literal
from wap_core.identifiers import quote_column
from wap_core.values import Record


@dataclass(frozen=True, kw_only=True)
class AcceptedValues(RowCheck):
    """Every non-null value of the column is one of ``values``."""

    type: ClassVar[str] = "accepted_values"
    values: tuple[Any, ...]

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        col = args.one_column()
        values = args.pop("values")
        if not isinstance(values, list) or not values or any(isinstance(v, (list, dict)) for v in values):
            raise args.fail("accepted_values: 'values' must be a non-empty list of plain values")
        return [args.spec(cls, f"accepted_values({col})", (col,), values=tuple(values))]

    @property
    def args(self) -> Record:
        return {"values": list(self.values)}

    def fail_sql(self) -> str:
        c = quote_column(self.columns[0])
        return f"{c} IS NOT NULL AND NOT ({c} IN ({', '.join(sql_literal(v) for v in self.values)}))"
