"""Validation of every name a user types before it can reach SQL.

Allowlist: ASCII letters, digits and ``_``; a table is ``namespace.table``.
Names are then quoted with backticks for Spark SQL as a second line of defence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wap_core.exceptions import ValidationError

# ASCII only, matched with fullmatch: "$" would accept a trailing newline, and \w would accept Unicode lookalikes.
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAIN = "main"
RESERVED_BRANCHES = frozenset({MAIN})


def validate_identifier(value: str, what: str = "name") -> str:
    """Return ``value`` if it is a plain identifier, else raise ValidationError."""
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{what} must not be empty")
    if not _IDENT.fullmatch(value):
        raise ValidationError(
            f"invalid {what} {value!r}: use only letters, digits and '_' (not starting with a digit), at most 128 characters"
        )
    return value


def validate_branch(value: str, *, allow_main: bool = False) -> str:
    """Validate a branch name; ``main`` is refused unless explicitly allowed."""
    validate_identifier(value, "branch name")
    if not allow_main and value.lower() in RESERVED_BRANCHES:
        raise ValidationError(f"branch name {value!r} is reserved: audit branches cannot be called main")
    return value


@dataclass(frozen=True, order=True)
class TableId:
    """A validated ``namespace.table`` identifier."""

    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str) -> TableId:
        """Validate ``namespace.table`` (each part by full match) into a TableId."""
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("table name must not be empty; use namespace.table")
        parts = text.split(".")
        if len(parts) != 2:
            raise ValidationError(f"invalid table name {text!r}: use namespace.table (exactly one '.')")
        ns, name = parts
        validate_identifier(ns, "namespace")
        validate_identifier(name, "table name")
        return cls(ns, name)

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def tuple(self) -> tuple[str, str]:
        """The identifier as PyIceberg takes it: ``(namespace, name)``."""
        return (self.namespace, self.name)

    def parts(self, catalog: str, branch: str | None = None) -> list[str]:
        """Validated name parts: catalog, namespace, table and optionally ``branch_<name>``."""
        validate_identifier(catalog, "catalog name")
        out = [catalog, self.namespace, self.name]
        if branch is not None:
            out.append("branch_" + validate_branch(branch, allow_main=True))
        return out

    def sql(self, catalog: str, branch: str | None = None) -> str:
        """Backtick-quoted Spark SQL name, optionally of a branch."""
        return ".".join(f"`{p}`" for p in self.parts(catalog, branch))

    def spark_name(self, catalog: str, branch: str | None = None) -> str:
        """Unquoted name for DataFrame APIs (``spark.table``, ``writeTo``); all parts validated."""
        return ".".join(self.parts(catalog, branch))


def quote_column(name: str) -> str:
    """Backtick-quote a column name for Spark SQL (columns come from the table schema or checks file)."""
    if not isinstance(name, str) or not name:
        raise ValidationError("column name must not be empty")
    return "`" + name.replace("`", "``") + "`"
