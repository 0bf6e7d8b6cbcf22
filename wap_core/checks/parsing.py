"""The checks file: YAML parsed up front (with line numbers) into typed specs through the registry."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from wap_core.checks.base import CheckSpec, Level
from wap_core.exceptions import ChecksFileError, ValidationError
from wap_core.identifiers import TableId

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
S = TypeVar("S", bound=CheckSpec)


@dataclass(frozen=True)
class Suite:
    """The checks of one table, from the checks file ``source``."""

    table: str
    checks: tuple[CheckSpec, ...]
    source: str | None = None


def parse_duration(text: str) -> float:
    """'36h' -> seconds. Units: s, m, h, d, w."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"invalid duration {text!r}: use a number and one of s, m, h, d, w (e.g. 36h)")
    return float(m.group(1)) * _UNITS[m.group(2)]


class Args:
    """The arguments of one check in the file, consumed by its type's ``parse``; errors carry file and line."""

    def __init__(
        self,
        ctype: str,
        opts: dict[str, Any],
        source: str,
        line: int,
        name: str | None,
        level: Level,
        max_failing_rows: int,
    ) -> None:
        self.ctype = ctype
        self.opts = opts
        self.source = source
        self.line = line
        self.name = name
        self.level = level
        self.max_failing_rows = max_failing_rows

    def fail(self, msg: str) -> ChecksFileError:
        """A ChecksFileError at this check's file and line."""
        return ChecksFileError(self.source, self.line, msg)

    def pop(self, key: str, default: Any = None) -> Any:
        """Take an argument out (leftovers are errors, see :meth:`no_leftovers`)."""
        return self.opts.pop(key, default)

    def columns(self, required: bool = True, key_single: str = "column") -> tuple[str, ...]:
        """The ``columns`` (or ``column``) argument as a tuple of names; () when optional and absent."""
        val = self.opts.pop("columns", None)
        single = self.opts.pop(key_single, None)
        if val is None and single is not None:
            val = single
        if isinstance(val, str):
            val = [val]
        if val is None or (isinstance(val, list) and not val):
            if required:
                raise self.fail(f"{self.ctype}: name the column(s) to check")
            return ()
        if not isinstance(val, list) or not all(isinstance(c, str) and c for c in val):
            raise self.fail(f"{self.ctype}: columns must be strings")
        return tuple(val)

    def one_column(self, what: str = "column") -> str:
        """The single column of a check that takes exactly one."""
        cols = self.columns()
        if len(cols) != 1:
            raise self.fail(f"{self.ctype}: give exactly one {what}")
        return cols[0]

    def number(
        self, key: str, default: float | None = None, *, integer: bool = False, minimum: float | None = None
    ) -> Any:
        """A numeric argument (an integer if ``integer``), at least ``minimum``; ``default`` when absent."""
        v = self.opts.pop(key, default)
        if v is None:
            return None
        kinds = (int,) if integer else (int, float)
        if not isinstance(v, kinds) or isinstance(v, bool) or (minimum is not None and v < minimum):
            kind = "an integer" if integer else "a number"
            bound = f" >= {minimum:g}" if minimum is not None else ""
            raise self.fail(f"{self.ctype}: {key} must be {kind}{bound}")
        return v

    def no_leftovers(self) -> None:
        """Fail on arguments the check type does not know."""
        if self.opts:
            raise self.fail(f"{self.ctype}: unknown argument(s) {sorted(self.opts)}")

    def spec(self, cls: type[S], default_name: str, columns: tuple[str, ...] = (), **type_fields: Any) -> S:
        """The spec, once every argument was consumed (leftovers are an error)."""
        self.no_leftovers()
        return cls(
            name=self.name or default_name,
            columns=columns,
            level=self.level,
            line=self.line,
            max_failing_rows=self.max_failing_rows,
            **type_fields,
        )


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
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ChecksFileError(source, line, f"invalid YAML: {getattr(exc, 'problem', exc)}") from exc
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


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _scalar(node: yaml.Node, source: str) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise ChecksFileError(source, _line(node), "expected a plain value here")
    return yaml.safe_load(yaml.serialize(node))


def _plain(node: yaml.Node) -> Any:
    return yaml.safe_load(yaml.serialize(node))


def parse_check(node: yaml.Node, source: str) -> list[CheckSpec]:
    """One ``- type: args`` item: common options here, the rest by the registered type's ``parse``."""
    from wap_core.checks.registry import AVAILABLE_CHECKS, yaml_types

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
    opts: dict[str, Any]
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
    return cls.parse(Args(ctype, opts, source, line, name, level, max_failing))
