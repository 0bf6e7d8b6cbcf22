"""Domain exceptions of wap_core, in one place.

Every error a user can cause derives from :class:`WapError` and carries an
``exit_code`` that the CLI returns: 2 for bad input / errors, 1 for refusals.
"""

from __future__ import annotations


class WapError(Exception):
    """Base class of every error wap_core raises on purpose."""

    exit_code: int = 2


class ValidationError(WapError, ValueError):
    """Input that can never be valid: a bad name, a malformed option."""


class NotFoundError(WapError, LookupError):
    """A table, branch, snapshot or source that does not exist."""


class SourceError(WapError):
    """A source file that is missing, unreadable, empty or malformed."""


class SchemaMismatchError(WapError):
    """The source does not fit the table's schema; ``mismatches`` lists every problem."""

    def __init__(self, table: str, mismatches: list[str]) -> None:
        self.table = table
        self.mismatches = list(mismatches)
        lines = "\n".join(f"  - {m}" for m in self.mismatches)
        super().__init__(f"source does not fit the schema of {table} ({len(self.mismatches)} problem(s)):\n{lines}")


class ChecksFileError(WapError):
    """The checks YAML is invalid; the message names file and line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.detail = message
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


class EnvironmentSetupError(WapError):
    """The machine lacks something wap_core needs (a JDBC driver jar, Java)."""


class RefusedError(WapError):
    """A guarded operation was refused (publish of a failed branch, ...). Exit code 1."""

    exit_code = 1

    def __init__(self, message: str, reason_code: str = "refused") -> None:
        self.reason_code = reason_code
        super().__init__(message)


class ConflictError(RefusedError):
    """A concurrent change won the race; nothing of ours was applied. Exit code 1."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason_code="conflict")


class AccessDeniedError(RefusedError):
    """The acting user's role does not allow the action. Exit code 1, reason code ``forbidden``.

    The message is one line: ``ann@corp.test (steward) may not publish: approver role needed``.
    """

    def __init__(self, message: str, *, user: str, role: str | None, needed: str, permission: str) -> None:
        self.user = user
        self.role = role
        self.needed = needed
        self.permission = permission
        super().__init__(message, reason_code="forbidden")


class AccessFileError(ValidationError):
    """The access file (roles) is invalid; the message names file and line. Exit code 2.

    Never read as "access control is off": a broken file stops every guarded action.
    """

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.detail = message
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
