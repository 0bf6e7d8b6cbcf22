"""What a check type's ``parse`` receives: the arguments of one check in the checks file (with its line).

Check modules depend on this module only; :mod:`wap_core.checks.parsing` reads the whole file through
the registry, above them.
"""

from __future__ import annotations

from typing import Any, TypeVar

from wap_core.checks.base import CheckSpec, Level
from wap_core.exceptions import ChecksFileError
from wap_core.values import JsonObject

S = TypeVar("S", bound=CheckSpec)


class Args:
    """The arguments of one check in the file, consumed by its type's ``parse``; errors carry file and line."""

    def __init__(
        self,
        ctype: str,
        opts: JsonObject,
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
