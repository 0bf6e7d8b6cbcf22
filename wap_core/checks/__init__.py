"""Data-quality checks: a registry of check types, YAML parsed up front, one Spark pass per batch.

Each check type is one module of this package (its typed spec, the aggregates it needs, how it
judges them, how it describes its threshold), registered in :mod:`wap_core.checks.registry`.
Shared parts: :mod:`~wap_core.checks.base` (spec base class, result, context),
:mod:`~wap_core.checks.parsing` (the checks file), :mod:`~wap_core.checks.engine` (the one pass
and the verdicts), :mod:`~wap_core.checks.store` (result cache and batch history).
"""

from __future__ import annotations

from wap_core.checks.base import (
    CheckResult,
    CheckSpec,
    Level,
    MainContext,
    Measurement,
    OtherRead,
    RowCheck,
    jsonable,
    sql_literal,
    summarize,
)
from wap_core.checks.engine import Evaluation, evaluate, metric_name, observed_metrics
from wap_core.checks.parsing import Args, Suite, load_checks, parse_checks, suite_for
from wap_core.checks.registry import (
    AVAILABLE_CHECKS,
    CHECK_TYPES,
    ROW_LEVEL,
    batch_builtins,
    check_type,
    yaml_types,
)
from wap_core.states import CheckStatus

__all__ = [
    "AVAILABLE_CHECKS",
    "CHECK_TYPES",
    "ROW_LEVEL",
    "Args",
    "CheckResult",
    "CheckSpec",
    "CheckStatus",
    "Evaluation",
    "Level",
    "MainContext",
    "Measurement",
    "OtherRead",
    "RowCheck",
    "Suite",
    "batch_builtins",
    "check_type",
    "evaluate",
    "jsonable",
    "load_checks",
    "metric_name",
    "observed_metrics",
    "parse_checks",
    "sql_literal",
    "suite_for",
    "summarize",
    "yaml_types",
]
