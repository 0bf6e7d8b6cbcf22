"""Ref moves in one place: commit conflicts mapped to one exception, one retry policy, branch removal.

Every commit that moves a ref (ingest's branch and batch, publish, rebase, discard, rollback, reopen,
gc, reconciliation's cleanup) runs inside :func:`commit_conflicts`, which turns a lost
optimistic-concurrency race of either engine into :class:`~wap_core.exceptions.CommitConflictError`:

* PyIceberg (metadata-only moves): ``pyiceberg.exceptions.CommitFailedException``;
* Spark (data commits and ``ALTER TABLE ... BRANCH``), through Py4J: Iceberg's
  ``CommitFailedException``, and its ``ValidationException`` "Cannot fast-forward" / "Cannot commit".

A conflict means nothing was committed, so it may be retried: :func:`with_commit_retry` (a Spark
commit, retried as is) and :func:`commit_with_retry` (a PyIceberg move, retried on freshly loaded
metadata while the caller's precondition still holds) share ONE policy, :data:`RETRY`. A commit whose
outcome is unknown (``CommitStateUnknownException``) is never retried nor mapped.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pyiceberg.exceptions import CommitFailedException

from wap_core.exceptions import CommitConflictError, NotFoundError, ValidationError
from wap_core.identifiers import MAIN, TableId
from wap_core.lake import catalog as cat

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

T = TypeVar("T")

# Text of a lost race in a JVM exception (the Java class name, or Iceberg's validation messages).
_CONFLICT_MARKERS = ("CommitFailedException", "Cannot commit", "Cannot fast-forward")
_UNKNOWN_MARKER = "CommitStateUnknownException"


@dataclass(frozen=True)
class RetryPolicy:
    """How often a lost commit race is retried, and how long to wait before each retry (doubling, jittered)."""

    attempts: int = 5
    first_delay: float = 0.1
    max_delay: float = 1.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based): 0.1, 0.2, 0.4, 0.8 s, ±25 %."""
        base = min(self.max_delay, self.first_delay * float(2**attempt))
        return base * random.uniform(0.75, 1.25)


RETRY = RetryPolicy()
"""The one retry policy of every ref-moving commit."""


def _jvm_error_types() -> tuple[type[BaseException], ...]:
    try:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors.exceptions.captured import CapturedException
    except ImportError:  # pragma: no cover - Spark is a dependency; metadata-only use may lack it
        return ()
    return (Py4JJavaError, CapturedException)


def is_commit_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a lost optimistic-concurrency race of an Iceberg commit (nothing was committed)."""
    if isinstance(exc, (CommitConflictError, CommitFailedException)):
        return True
    if isinstance(exc, _jvm_error_types()):
        text = str(exc)
        return _UNKNOWN_MARKER not in text and any(m in text for m in _CONFLICT_MARKERS)
    return False


def is_commit_state_unknown(exc: BaseException) -> bool:
    """Whether ``exc`` says a commit's outcome is unknown (it may have landed): never retried."""
    return isinstance(exc, _jvm_error_types()) and _UNKNOWN_MARKER in str(exc)


def _first_line(exc: BaseException) -> str:
    """The line naming the conflict (a Py4J error starts with "An error occurred while calling ..."), else the first."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    named = [ln for ln in lines if any(m in ln for m in _CONFLICT_MARKERS)]
    return (named or lines or [type(exc).__name__])[0][:500]


@contextmanager
def commit_conflicts() -> Iterator[None]:
    """The one place that maps a commit conflict (either engine) raised inside to :class:`CommitConflictError`."""
    try:
        yield
    except CommitConflictError:
        raise
    except Exception as exc:
        if not is_commit_conflict(exc):
            raise
        raise CommitConflictError(
            f"the commit lost a race with a concurrent change: {_first_line(exc)}"
        ) from exc


def with_commit_retry(commit: Callable[[], T], policy: RetryPolicy = RETRY) -> T:
    """Run a Spark commit, retried (per ``policy``) while it loses commit races; then CommitConflictError."""
    for attempt in range(policy.attempts):
        try:
            with commit_conflicts():
                return commit()
        except CommitConflictError as exc:
            if attempt == policy.attempts - 1:
                raise
            log.info("commit lost a race (attempt %d of %d), retrying: %s", attempt + 1, policy.attempts, exc)
            time.sleep(policy.delay(attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def commit_with_retry(
    catalog: Catalog,
    table: TableId,
    move: Callable[[Table], T],
    *,
    retry_if: Callable[[Table], bool] | None = None,
    tbl: Table | None = None,
    policy: RetryPolicy = RETRY,
) -> T:
    """Run the PyIceberg ref move ``move(tbl)``; on a lost race reload the table and retry while ``retry_if(tbl)``.

    ``tbl``: the metadata the first attempt commits against (default: loaded now). ``retry_if`` is the
    caller's precondition, checked on fresh metadata before each retry (default: always retry). Raises
    :class:`CommitConflictError` after the last attempt or as soon as the precondition broke.
    """
    tbl = tbl if tbl is not None else cat.load_table(catalog, table)
    for attempt in range(policy.attempts):
        try:
            with commit_conflicts():
                return move(tbl)
        except CommitConflictError as exc:
            if attempt == policy.attempts - 1:
                raise
            tbl = cat.load_table(catalog, table)
            if retry_if is not None and not retry_if(tbl):
                raise
            log.info(
                "ref move on %s lost a race (attempt %d of %d), retrying: %s",
                table,
                attempt + 1,
                policy.attempts,
                exc,
            )
            time.sleep(policy.delay(attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def create_branch_at(
    catalog: Catalog, table: TableId, name: str, snapshot_id: int, tbl: Table | None = None
) -> None:
    """Create branch ``name`` at ``snapshot_id`` (a reopen, a job's open): retried on another ref's commit, never
    once the name was taken meanwhile (then CommitConflictError: the race is lost)."""

    def create(t: Table) -> None:
        t.manage_snapshots().create_branch(snapshot_id, name).commit()

    commit_with_retry(catalog, table, create, retry_if=lambda t: name not in t.metadata.refs, tbl=tbl)


def point_main(t: Table, snapshot_id: int, *, remove: str | None = None) -> None:
    """Point main at ``snapshot_id`` in one metadata commit, keeping main's retention settings; branch
    ``remove`` (a published batch's) goes in the same commit. Run it through :func:`commit_with_retry`."""
    main_ref = t.metadata.refs.get(MAIN)
    moves = t.manage_snapshots().create_branch(
        snapshot_id,
        MAIN,
        max_ref_age_ms=main_ref.max_ref_age_ms if main_ref else None,
        max_snapshot_age_ms=main_ref.max_snapshot_age_ms if main_ref else None,
        min_snapshots_to_keep=main_ref.min_snapshots_to_keep if main_ref else None,
    )
    if remove is not None:
        moves = moves.remove_branch(remove)
    moves.commit()


def remove_branch(
    catalog: Catalog, table: TableId, name: str, *, head: int | None = None, tbl: Table | None = None
) -> bool:
    """Remove branch ``name`` (only while it is at ``head``, when given), retried on a commit race.

    False when the branch is gone or moved (then there is nothing of ours to remove);
    CommitConflictError when every attempt lost a race while the branch stayed.
    """

    def there(t: Table) -> bool:
        now = cat.ref_snapshot_id(t, name)
        return now is not None and (head is None or now == head)

    def move(t: Table) -> bool:
        t.manage_snapshots().remove_branch(name).commit()
        return True

    tbl = tbl if tbl is not None else cat.load_table(catalog, table)
    if not there(tbl):
        return False
    try:
        return commit_with_retry(catalog, table, move, retry_if=there, tbl=tbl)
    except CommitConflictError:
        if not there(cat.load_table(catalog, table)):
            return False
        raise


def remove_branch_quietly(catalog: Catalog, table: TableId, name: str) -> None:
    """Best-effort cleanup after another error: remove ``name`` if it exists; a failure is logged, never raised."""
    try:
        remove_branch(catalog, table, name)
    except Exception:
        log.warning("could not remove branch %s of %s during cleanup", name, table, exc_info=True)


def _load(catalog: Catalog, table: str) -> Table | None:
    """The table's metadata without reconciliation (reconciliation itself calls :func:`remove_branches`)."""
    try:
        return cat.load_table(catalog, TableId.parse(table))
    except (NotFoundError, ValidationError):
        return None


def remove_branches(catalog: Catalog, table: str, names: Sequence[str], policy: RetryPolicy = RETRY) -> None:
    """Remove these branches where they still exist (one commit; retried on a commit race; a final failure is logged)."""
    for attempt in range(policy.attempts):
        tbl = _load(catalog, table)
        present = [n for n in names if tbl is not None and n in tbl.metadata.refs]
        if tbl is None or not present:
            return
        ms = tbl.manage_snapshots()
        for n in present:
            ms = ms.remove_branch(n)
        try:
            with commit_conflicts():
                ms.commit()
            log.info("removed leftover branch(es) %s of %s", ", ".join(present), table)
            return
        except CommitConflictError as exc:
            if attempt == policy.attempts - 1:
                log.warning("could not remove branch(es) %s of %s: %s", ", ".join(present), table, exc)
                return
            time.sleep(policy.delay(attempt))
