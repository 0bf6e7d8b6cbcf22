"""``not_null: [col, ...]``: no NULL in each column (one result per column)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckSpec, RowCheck
from wap_core.identifiers import quote_column


@dataclass(frozen=True, kw_only=True)
class NotNull(RowCheck):
    """The column(s) have no nulls (one check per column)."""

    type: ClassVar[str] = "not_null"

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        cols = args.columns()
        args.no_leftovers()
        name = args.name

        def named(c: str) -> str:
            if name and len(cols) > 1:
                return f"{name}[{c}]"
            return name or f"not_null({c})"

        return [
            cls(
                name=named(c),
                columns=(c,),
                level=args.level,
                line=args.line,
                max_failing_rows=args.max_failing_rows,
            )
            for c in cols
        ]

    def fail_sql(self) -> str:
        return f"{quote_column(self.columns[0])} IS NULL"
