"""``expression: {name, sql}``: a SQL predicate every row must satisfy (NULL counts as failing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckSpec, RowCheck


@dataclass(frozen=True, kw_only=True)
class Expression(RowCheck):
    """Every row satisfies a SQL predicate (NULL counts as failing)."""

    type: ClassVar[str] = "expression"
    sql: str

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        sql = args.pop("sql")
        if not isinstance(sql, str) or not sql.strip():
            raise args.fail("expression: 'sql' must be a SQL predicate, e.g. \"air_time > 0\"")
        if ";" in sql:
            raise args.fail("expression: 'sql' must be a single predicate (no ';')")
        return [args.spec(cls, f"expression({sql})", (), sql=sql)]

    def fail_sql(self) -> str:
        return f"NOT COALESCE(CAST(({self.sql}) AS BOOLEAN), FALSE)"
