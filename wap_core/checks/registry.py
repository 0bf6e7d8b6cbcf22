"""The registry: YAML key -> check type, in one dict (like PyIceberg's ``AVAILABLE_CATALOGS``).

Adding a check type is one new module beside this one (a :class:`~wap_core.checks.base.CheckSpec`
subclass) and one line here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from wap_core.checks.accepted_values import AcceptedValues
from wap_core.checks.anomaly import Anomaly
from wap_core.checks.base import CheckResult, CheckSpec
from wap_core.checks.change_limits import ChangedRows, RemovedRows
from wap_core.checks.drift import Drift
from wap_core.checks.expression import Expression
from wap_core.checks.freshness import Freshness
from wap_core.checks.malformed_rows import MalformedRows
from wap_core.checks.not_null import NotNull
from wap_core.checks.pattern import Pattern
from wap_core.checks.range_check import Range
from wap_core.checks.references import References
from wap_core.checks.row_count import RowCount
from wap_core.checks.schema import Schema
from wap_core.checks.unique import Unique

AVAILABLE_CHECKS: dict[str, type[CheckSpec]] = {
    "not_null": NotNull,
    "unique": Unique,
    "row_count": RowCount,
    "accepted_values": AcceptedValues,
    "range": Range,
    "pattern": Pattern,
    "expression": Expression,
    "freshness": Freshness,
    "references": References,
    "schema": Schema,
    "anomaly": Anomaly,
    "drift": Drift,
    "removed_rows": RemovedRows,
    "changed_rows": ChangedRows,
    "malformed_rows": MalformedRows,  # built-in: every batch, never in the checks file
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


def batch_builtins(summaries: Sequence[Mapping[str, str]]) -> list[CheckSpec]:
    """The built-in checks a batch gets whatever its suite says, from its snapshots' summaries."""
    return [spec for cls in AVAILABLE_CHECKS.values() if cls.builtin for spec in cls.for_batch(summaries)]


def key_columns(checks: Iterable[CheckResult]) -> list[str]:
    """The table's key from an audit's results: the columns of its key-defining checks, in suite order."""
    out: list[str] = []
    for c in checks:
        cls = AVAILABLE_CHECKS.get(c.type)
        if cls is not None and cls.defines_key:
            out += [col for col in c.columns or [] if col not in out]
    return out
