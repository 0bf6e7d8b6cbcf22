"""``pattern: {column, regex}``: every non-NULL value (as text) matches the Java regex."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckSpec, RowCheck, sql_literal
from wap_core.identifiers import quote_column


@dataclass(frozen=True, kw_only=True)
class Pattern(RowCheck):
    """Every non-null value of the column matches a regular expression."""

    type: ClassVar[str] = "pattern"
    regex: str

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        col = args.one_column()
        regex = args.pop("regex")
        if not isinstance(regex, str) or not regex:
            raise args.fail("pattern: 'regex' must be a non-empty string")
        try:
            re.compile(regex)
        except re.error as exc:
            raise args.fail(f"pattern: invalid regex {regex!r}: {exc}") from exc
        return [args.spec(cls, f"pattern({col})", (col,), regex=regex)]

    def fail_sql(self) -> str:
        c = quote_column(self.columns[0])
        return f"{c} IS NOT NULL AND NOT (CAST({c} AS STRING) RLIKE {sql_literal(self.regex)})"
