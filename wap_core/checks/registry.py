"""The registry: YAML key -> check type, in one dict (like PyIceberg's ``AVAILABLE_CATALOGS``).

Adding a check type is one new module beside this one (a :class:`~wap_core.checks.base.CheckSpec`
subclass) and one line here.
"""

from __future__ import annotations

from wap_core.checks import (
    accepted_values,
    anomaly,
    drift,
    expression,
    freshness,
    malformed_rows,
    not_null,
    pattern,
    range_check,
    references,
    row_count,
    schema,
    unique,
)
from wap_core.checks.base import CheckSpec

AVAILABLE_CHECKS: dict[str, type[CheckSpec]] = {
    "not_null": not_null.NotNull,
    "unique": unique.Unique,
    "row_count": row_count.RowCount,
    "accepted_values": accepted_values.AcceptedValues,
    "range": range_check.Range,
    "pattern": pattern.Pattern,
    "expression": expression.Expression,
    "freshness": freshness.Freshness,
    "references": references.References,
    "schema": schema.Schema,
    "anomaly": anomaly.Anomaly,
    "drift": drift.Drift,
    "malformed_rows": malformed_rows.MalformedRows,  # built-in: every batch, never in the checks file
}

for _key, _cls in AVAILABLE_CHECKS.items():
    assert _cls.type == _key, f"check type {_cls.__name__} registered as {_key!r} but says {_cls.type!r}"


def check_type(key: str) -> type[CheckSpec]:
    """The check type registered under the YAML key ``key`` (KeyError if none)."""
    return AVAILABLE_CHECKS[key]


def yaml_types() -> list[str]:
    """The keys a checks file may use (built-ins excluded), sorted."""
    return sorted(k for k, c in AVAILABLE_CHECKS.items() if not c.builtin)


ROW_LEVEL = frozenset(k for k, c in AVAILABLE_CHECKS.items() if c.row_level)
CHECK_TYPES = frozenset(AVAILABLE_CHECKS)
