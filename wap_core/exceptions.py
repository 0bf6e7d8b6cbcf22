"""Domain exceptions of wap_core, in one place.

Every error a user can cause derives from :class:`WapError` and carries an
``exit_code`` that the CLI returns: 2 for bad input / errors, 1 for refusals.
"""

from __future__ import annotations

import re


class WapError(Exception):
    """Base class of every error wap_core raises on purpose."""

    exit_code: int = 2
    journaled: bool = False  # set once the error is the outcome row of an intent (not to be recorded twice)


_LINE_BREAKS = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def one_line(message: str) -> str:
    """``message`` with every line break escaped (``\\n``, ``\\u2028``...): user text never adds a line to an error."""
    return _LINE_BREAKS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), message)


# C0 controls but tab and line feed, DEL and C1: ESC/CSI/OSC start terminal escape sequences, BEL ends an OSC,
# CR overwrites a line, backspace erases
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character but tab and line feed shown as its escape (``\\x1b``, ``\\r``):
    a message never drives the terminal it is printed on (a title change, a cleared screen, a line
    overwritten by ``\\r``), and the reader still sees which bytes were there."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def first_line(error: BaseException | str) -> str:
    """The first non-blank line of an error's message, stripped; a message-less exception: its type's name."""
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__ if isinstance(error, BaseException) else ""


class ValidationError(WapError, ValueError):
    """Input that can never be valid: a bad name, a malformed option. Always one line."""

    def __init__(self, message: str = "") -> None:
        super().__init__(one_line(str(message)))


class NotFoundError(WapError, LookupError):
    """A table, branch, snapshot or source that does not exist."""


class SourceError(WapError):
    """A source file that is missing, unreadable, empty or malformed. Always one line."""

    def __init__(self, message: str = "") -> None:
        super().__init__(one_line(str(message)))


class SparkJobError(ValidationError):
    """A query or Spark job failed: Spark's error class and message in one line, never a Py4J object name.

    E.g. ``SQL error: DUPLICATED_MAP_KEY: Duplicate map key 1 was found, ...``; ``error_class`` is Spark's
    (None when the error has none). Built by :func:`wap_core.lake.errors.spark_job_error`. Exit code 2.
    """

    def __init__(self, message: str = "", *, error_class: str | None = None) -> None:
        self.error_class = error_class
        super().__init__(message)


class PathNotAllowedError(ValidationError):
    """A server-side source outside the allowed ingest roots (``WAP_INGEST_ROOTS``); the message names the roots."""


class SchemaMismatchError(WapError):
    """The source does not fit the table's schema; ``mismatches`` lists every problem."""

    def __init__(self, table: str, mismatches: list[str]) -> None:
        self.table = table
        self.mismatches = list(mismatches)
        super().__init__(  # one line (a CLI error is one line): the problems joined by "; "
            f"source does not fit the schema of {table} ({len(self.mismatches)} problem(s)): "
            + "; ".join(self.mismatches)
        )


class _FileError(WapError):
    """A configuration file that is invalid: ``path:line: message`` (``detail`` is the message alone)."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.detail = message
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


class ChecksFileError(_FileError):
    """The checks YAML is invalid; the message names file and line."""


class EnvironmentSetupError(WapError):
    """The machine lacks something wap_core needs (a JDBC driver jar, Java)."""


class QueryCancelledError(WapError):
    """A user's Spark work was cancelled (the Cancel button, the session ended) and its jobs stopped. Exit code 2.

    ``reason`` is ``cancelled`` | ``timeout`` | ``session_ended``. Always one line.
    """

    def __init__(self, message: str, reason: str = "cancelled") -> None:
        self.reason = reason
        super().__init__(one_line(str(message)))


class QueryTimeoutError(QueryCancelledError):
    """A user's Spark work ran longer than ``WAP_QUERY_TIMEOUT`` and was cancelled. Exit code 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="timeout")


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


class BranchBusyError(ConflictError):
    """Another ref-moving action on the same branch is still in flight (its intent is pending). Exit code 1."""


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


class AccessFileError(_FileError, ValidationError):
    """The access file (roles) is invalid; the message names file and line. Exit code 2.

    Never read as "access control is off": a broken file stops every guarded action.
    """


class NotifyFileError(_FileError, ValidationError):
    """The notification targets file (``WAP_NOTIFY``) is invalid; the message names file and line. Exit code 2.

    Never read as "no targets": ``notify-test`` exits 2 and every event that could not be queued
    because of it is journaled (action ``notify``, outcome ``failed``).
    """


class CommitConflictError(ConflictError):
    """An Iceberg commit lost an optimistic-concurrency race: nothing of it was applied. Exit code 1.

    The one typed form of every engine's conflict (PyIceberg's ``CommitFailedException``; through Py4J,
    Iceberg's ``CommitFailedException`` and ``ValidationException`` "Cannot fast-forward" / "Cannot commit"),
    raised by :func:`wap_core.lake.refs.commit_conflicts`, the one place that maps them.
    """


class AlreadyReopenedError(RefusedError):
    """A rolled-back batch is already open again as a branch (``branch``): reopening it once more makes a
    duplicate, so it needs ``again`` and a reason. Exit code 1, reason code ``already_open``."""

    def __init__(self, message: str, *, table: str, snapshot_id: int, branch: str) -> None:
        self.table = table
        self.snapshot_id = snapshot_id
        self.branch = branch
        super().__init__(message, reason_code="already_open")


class AuditFailedError(RefusedError):
    """A pipeline step needed a passing audit and the audit failed (``wap_core.pipeline``). Exit code 1."""

    def __init__(self, message: str, failed_checks: list[str]) -> None:
        self.failed_checks = list(failed_checks)
        super().__init__(message, reason_code="audit_failed")

    def __reduce__(self) -> tuple[type[AuditFailedError], tuple[str, list[str]]]:
        return (type(self), (str(self), self.failed_checks))  # picklable: durable workflows store errors


class BatchRejectedError(RefusedError):
    """A person decided against a pipeline's batch: discarded, or changes requested (``wap_core.pipeline``).

    Exit code 1; ``reason_code`` is the decision (``discarded`` | ``changes_requested`` | ``timed_out``).
    """

    def __init__(self, message: str, decision: str) -> None:
        self.decision = decision
        super().__init__(message, reason_code=decision)

    def __reduce__(self) -> tuple[type[BatchRejectedError], tuple[str, str]]:
        return (type(self), (str(self), self.decision))  # picklable: durable workflows store errors
