"""The checks file: YAML parsed up front (with line numbers) into typed specs through the registry.

``Args`` lives in :mod:`wap_core.checks.args` (re-exported here); durations are parsed by
:func:`wap_core.durations.parse_duration`, the one parser of the project.
"""

from __future__ import annotations

__all__ = ["Args", "Suite", "load_checks", "parse_check", "parse_checks", "suite_for"]

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from wap_core import yamlnodes
from wap_core.checks.args import Args
from wap_core.checks.base import CheckSpec, Level
from wap_core.checks.registry import AVAILABLE_CHECKS, yaml_types
from wap_core.exceptions import ChecksFileError, ValidationError
from wap_core.identifiers import TableId
from wap_core.states import OnFail
from wap_core.values import JsonObject
from wap_core.yamlnodes import line as _line


@dataclass(frozen=True)
class Suite:
    """The checks of one table, from the checks file ``source``."""

    table: str
    checks: tuple[CheckSpec, ...]
    source: str | None = None

    @property
    def key(self) -> tuple[str, ...]:
        """The table's declared key: the columns of its first key-defining check (``unique``), else ()."""
        for spec in self.checks:
            if spec.defines_key and spec.columns:
                return tuple(spec.columns)
        return ()


def load_checks(path: str | Path) -> dict[str, Suite]:
    """Parse a whole checks file. Missing file -> no suites. Errors name file and line."""
    p = Path(path)
    if not p.exists():
        return {}
    try:
        text = p.read_text()
    except OSError as exc:
        raise ChecksFileError(str(p), None, f"cannot read: {exc.strerror}") from exc
    return parse_checks(text, str(p))


def suite_for(checks_file: Path, table: TableId) -> Suite:
    """The suite of ``table`` in the checks file (empty when the file has none for it)."""
    return load_checks(checks_file).get(str(table), Suite(str(table), (), str(checks_file)))


def parse_checks(text: str, source: str = "<checks>") -> dict[str, Suite]:
    """Parse a checks file's text into suites by table; ChecksFileError with the line on bad input."""
    root = yamlnodes.compose(text, source, ChecksFileError)
    if root is None:
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise ChecksFileError(
            source, _line(root), "the file must be a mapping from namespace.table to its suite"
        )
    suites: dict[str, Suite] = {}
    for key_node, val_node in root.value:
        tname = _scalar(key_node, source)
        try:
            tid = TableId.parse(str(tname))
        except ValidationError as exc:
            raise ChecksFileError(source, _line(key_node), str(exc)) from exc
        if str(tid) in suites:
            raise ChecksFileError(source, _line(key_node), f"table {tid} is listed twice")
        if not isinstance(val_node, yaml.MappingNode):
            raise ChecksFileError(source, _line(val_node), f"{tid}: expected a mapping with a 'checks' list")
        body = {(_scalar(k, source)): v for k, v in val_node.value}
        unknown = set(body) - {"checks"}
        if unknown:
            raise ChecksFileError(
                source, _line(val_node), f"{tid}: unknown key(s) {sorted(unknown)}; expected 'checks'"
            )
        checks_node = body.get("checks")
        if checks_node is None or not isinstance(checks_node, yaml.SequenceNode):
            raise ChecksFileError(source, _line(val_node), f"{tid}: 'checks' must be a list")
        specs: list[CheckSpec] = []
        for item in checks_node.value:
            specs.extend(parse_check(item, source))
        names = [s.name for s in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ChecksFileError(
                source, _line(checks_node), f"{tid}: duplicate check name(s) {dup}; give each a 'name'"
            )
        suites[str(tid)] = Suite(str(tid), tuple(specs), source)
    return suites


def _scalar(node: yaml.Node, source: str) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise ChecksFileError(source, _line(node), "expected a plain value here")
    return yaml.safe_load(yaml.serialize(node))


def _plain(node: yaml.Node) -> Any:
    return yaml.safe_load(yaml.serialize(node))


def parse_check(node: yaml.Node, source: str) -> list[CheckSpec]:
    """One ``- type: args`` item: common options here, the rest by the registered type's ``parse``."""
    line = _line(node)
    if not isinstance(node, yaml.MappingNode) or len(node.value) != 1:
        raise ChecksFileError(
            source, line, "each check must be a one-key mapping {type: args}, e.g. '- not_null: [id]'"
        )
    type_node, args_node = node.value[0]
    ctype = _scalar(type_node, source)
    cls = AVAILABLE_CHECKS.get(ctype) if isinstance(ctype, str) else None
    if cls is None or cls.builtin:
        raise ChecksFileError(
            source, line, f"unknown check type {ctype!r}; allowed: {', '.join(yaml_types())}"
        )
    raw = _plain(args_node)
    opts: JsonObject
    if isinstance(raw, Mapping):
        opts = dict(raw)
    elif isinstance(raw, (str, list)):
        opts = {"columns": raw}
    elif raw is None:
        opts = {}
    else:
        raise ChecksFileError(
            source, line, f"{ctype}: arguments must be a column, a list of columns or a mapping"
        )
    name = opts.pop("name", None)
    level_raw = opts.pop("level", "fail")
    try:
        level = Level(level_raw)
    except ValueError:
        raise ChecksFileError(
            source, line, f"{ctype}: level must be 'fail' or 'warn', not {level_raw!r}"
        ) from None
    max_failing = opts.pop("max_failing_rows", 0)
    if not isinstance(max_failing, int) or isinstance(max_failing, bool) or max_failing < 0:
        raise ChecksFileError(source, line, f"{ctype}: max_failing_rows must be a non-negative integer")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ChecksFileError(source, line, f"{ctype}: name must be a non-empty string")
    on_fail = _on_fail(opts.pop("on_fail", OnFail.FAIL.value), ctype, level, source, line)
    specs = cls.parse(Args(ctype, opts, source, line, name, level, max_failing))
    if on_fail is OnFail.FAIL:
        return specs
    for spec in specs:
        if not spec.selects_rows:
            raise ChecksFileError(
                source,
                line,
                f"{ctype}: on_fail: quarantine is only for row-level checks (not_null, accepted_values, range, "
                f"pattern, expression, references, unique); {ctype} judges the batch as a whole: it cannot be "
                "repaired by removing rows",
            )
    return [replace(spec, on_fail=on_fail) for spec in specs]


def _on_fail(raw: Any, ctype: str, level: Level, source: str, line: int) -> OnFail:
    """``on_fail:`` of a check: ``fail`` (default) or ``quarantine`` (a fail-level check's only: a ``warn`` check
    never fails its audit, so its rows stay)."""
    try:
        on_fail = OnFail(raw) if isinstance(raw, str) else None
    except ValueError:
        on_fail = None
    if on_fail is None:
        raise ChecksFileError(source, line, f"{ctype}: on_fail must be 'fail' or 'quarantine', not {raw!r}")
    if on_fail is OnFail.QUARANTINE and level is Level.WARN:
        raise ChecksFileError(
            source,
            line,
            f"{ctype}: on_fail: quarantine needs level: fail (a warn-level check never fails its audit)",
        )
    return on_fail
