"""The states the core decides, as enums: a check's status, a branch's status, the journal's words.

Every enum is a ``(str, Enum)`` whose values are the strings the CLI prints, the JSON carries and
the journal stores, so ``status == "failed"`` and ``json.dumps`` keep working; ``str()`` and
f-strings give the value. The decisions themselves live here, once:

- which check statuses block a publish (:attr:`CheckStatus.blocks_publish`),
- the overall status of an audit (:func:`overall_status`),
- the status of a branch from its head, its latest audit and whether its ingest finished
  (:func:`branch_status`), used by ``status``, ``publish`` and the console pages.
- the status of a batch that spans tables: its worst table's (:attr:`BranchStatus.rank`,
  :func:`worst_branch_status`).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any, Protocol

from wap_core import actions


class _Word(str, Enum):
    """A state whose value is the string written everywhere (``str()`` and f-strings give the value)."""

    def __str__(self) -> str:
        return str(self.value)


class CheckStatus(_Word):
    """The status of one check, and of an audit as a whole (``passed``, ``warned`` or ``failed``)."""

    PASSED = "passed"
    WARNED = "warned"
    FAILED = "failed"
    ERROR = "error"  # the check could not be evaluated (counts as a failure)

    @property
    def blocks_publish(self) -> bool:
        """A failed or errored check fails the audit: the branch may not be published without force."""
        return self in (CheckStatus.FAILED, CheckStatus.ERROR)

    @property
    def ok(self) -> bool:
        """Passed, possibly with warnings."""
        return not self.blocks_publish

    @property
    def rank(self) -> int:
        """Worst first: error, failed, warned, passed (the console's sort order)."""
        return _CHECK_RANK[self]


_CHECK_RANK = {CheckStatus.ERROR: 0, CheckStatus.FAILED: 1, CheckStatus.WARNED: 2, CheckStatus.PASSED: 3}


def overall_status(statuses: Iterable[CheckStatus | str]) -> CheckStatus:
    """An audit's status: failed if any check failed or errored, else warned if any warned, else passed."""
    seen = {CheckStatus(s) for s in statuses}
    if any(s.blocks_publish for s in seen):
        return CheckStatus.FAILED
    if CheckStatus.WARNED in seen:
        return CheckStatus.WARNED
    return CheckStatus.PASSED


class OnFail(_Word):
    """What a failing check does to its batch (``on_fail:`` of a check in the checks file).

    ``fail`` (the default): the check fails the audit, as always. ``quarantine`` (row-level checks only): an
    ingest whose audit fails the check moves the check's failing rows to the table's quarantine table
    (:mod:`wap_core.workflow.quarantine_policy`) and audits the branch again; nothing is dropped.
    """

    FAIL = "fail"
    QUARANTINE = "quarantine"


class BatchRead(_Word):
    """How a branch's change since its fork is read (the audit's JSON ``changes.method``).

    ``append``: only appends, read by Iceberg's incremental append scan of the new files.
    ``changelog``: updates, deletes or overwrites (copy-on-write), read from the files the branch's
    snapshots added and removed (Iceberg's changelog scan), carried-over rows cancelled.
    ``full_comparison``: a snapshot with delete files (merge-on-read), which Iceberg 1.10's changelog
    scan refuses: the head and the fork compared whole (``head EXCEPT ALL fork``), said as such.
    ``whole_table``: the table had no main when the branch started: every row of the head is new.
    """

    APPEND = "append"
    CHANGELOG = "changelog"
    FULL_COMPARISON = "full_comparison"
    WHOLE_TABLE = "whole_table"


class BranchStatus(_Word):
    """Where an open branch stands (``wap branches``, the console's badges)."""

    PASSED = "passed"  # audited at its head, every check passed
    WARNED = "warned"  # audited at its head, passed with warnings
    FAILED = "failed"  # audited at its head, a check failed or errored
    NOT_AUDITED = "not_audited"  # never audited
    STALE = "stale"  # audited, but the branch moved since
    INCOMPLETE = "incomplete"  # an ingest created it but never finished writing its batch

    @property
    def publishable(self) -> bool:
        """The audit allows a publish (the review policy and main's position are judged separately)."""
        return self in (BranchStatus.PASSED, BranchStatus.WARNED)

    @property
    def blocks_publish(self) -> bool:
        """True when this status refuses a publish (failed, not audited, stale, incomplete)."""
        return not self.publishable

    @property
    def needs_audit(self) -> bool:
        """No audit speaks for the branch's head."""
        return self in (BranchStatus.NOT_AUDITED, BranchStatus.STALE)

    @property
    def rank(self) -> int:
        """Worst first (the status of a batch is its worst table's; see :func:`worst_branch_status`)."""
        return _BRANCH_RANK[self]


# Worst first. A status that blocks a publish is worse than one that allows it; among the blocking ones, one
# that needs the data itself mended (incomplete: its batch was never fully written; failed: a check failed on
# the head) is worse than one an audit may clear (not_audited: no evidence at all, then stale: evidence of an
# earlier head); warned is worse than passed.
_BRANCH_RANK = {
    BranchStatus.INCOMPLETE: 0,
    BranchStatus.FAILED: 1,
    BranchStatus.NOT_AUDITED: 2,
    BranchStatus.STALE: 3,
    BranchStatus.WARNED: 4,
    BranchStatus.PASSED: 5,
}


def worst_branch_status(statuses: Iterable[BranchStatus | str]) -> BranchStatus:
    """The worst of ``statuses`` by :attr:`BranchStatus.rank` (a batch's status: its worst table's).

    ValueError for no status at all (a batch always has a table)."""
    return min((BranchStatus(s) for s in statuses), key=lambda s: s.rank)


class AuditOfHead(Protocol):
    """What :func:`branch_status` reads of an audit (a stored audit or an :class:`AuditResult`)."""

    @property
    def snapshot_id(self) -> int | None:
        """The snapshot the audit judged."""
        ...

    @property
    def status(self) -> CheckStatus:
        """The audit's overall status."""
        ...


def branch_status(head: int | None, audit: AuditOfHead | None, *, incomplete: bool = False) -> BranchStatus:
    """THE status of a branch at ``head`` given its latest ``audit`` (None: never audited).

    ``incomplete``: an ingest created the branch and never finished its batch (from the journal);
    an audit of the head itself outranks it.
    """
    if incomplete and (audit is None or audit.snapshot_id != head):
        return BranchStatus.INCOMPLETE
    if audit is None:
        return BranchStatus.NOT_AUDITED
    if audit.snapshot_id != head:
        return BranchStatus.STALE
    return BranchStatus(CheckStatus(audit.status).value)


class _JournalWord(_Word):
    """A word the journal stores: values written by other versions are read back, never refused."""

    @classmethod
    def _missing_(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return None
        member = str.__new__(cls, value)
        member._name_ = value.upper()
        member._value_ = value
        return member


class Action(_JournalWord):
    """The ``action`` of a journal entry (and of a ref-moving intent).

    The typed names of the journal words: an action's word is declared in its module of
    :mod:`wap_core.actions` (``tests/test_action_registry.py`` checks each declared word is a member);
    the others are journal words no action declares (reads, table creation, expiry, notifications).
    """

    READ = "read"
    INGEST = "ingest"
    CREATE = "create"
    AUDIT = "audit"
    PUBLISH = "publish"
    REBASE = "rebase"
    QUARANTINE = "quarantine"
    DISCARD = "discard"
    COMMENT = "comment"
    APPROVE = "approve"
    REQUEST_CHANGES = "request_changes"
    ROLLBACK = "rollback"
    REOPEN = "reopen"
    OPEN = "open"  # a job's branch opened (created at main's head) or taken over (its author journaled)
    GC = "gc"
    EXPIRE = "expire"
    NOTIFY = "notify"
    ADMIN = "admin"
    CREATE_TOKEN = "create_token"
    REVOKE_TOKEN = "revoke_token"
    LIST_TOKENS = "list_tokens"  # refused only (reading the tokens is not journaled)
    AUTHENTICATE = "authenticate"  # refused only (an unknown, expired or revoked token)

    @property
    def moves_ref(self) -> bool:
        """Announced as an intent before its Iceberg commit (see :mod:`wap_core.store.journal`)."""
        return self in INTENT_ACTIONS


# the actions declared as moving a ref (wap_core.actions: ``moves_ref``)
INTENT_ACTIONS = frozenset(Action(word) for word in actions.INTENT_WORDS)


class Outcome(_JournalWord):
    """The ``outcome`` of a journal entry."""

    # audits (an audit's overall status)
    PASSED = "passed"
    WARNED = "warned"
    FAILED = "failed"  # also: a notification given up
    # ref moves that landed
    WRITTEN = "written"
    CREATED = "created"
    PUBLISHED = "published"
    FORCED = "forced"
    REBASED = "rebased"
    QUARANTINED = "quarantined"  # failing rows of a batch moved to its quarantine table
    DISCARDED = "discarded"
    ROLLED_BACK = "rolled_back"
    REOPENED = "reopened"
    OPENED = "opened"  # a branch created for a job's own Spark writes
    TAKEN_OVER = "taken_over"  # an existing branch's authorship taken by the user who opened it
    EXPIRED = "expired"
    REMOVED = "removed"
    # reviews
    APPROVED = "approved"
    CHANGES_REQUESTED = "changes_requested"
    # service tokens
    REVOKED = "revoked"
    # nothing moved
    REFUSED = "refused"
    ERROR = "error"
    ABANDONED = "abandoned"
    INCOMPLETE = "incomplete"


# the journal outcomes of a move of main that landed: a publish (a reopened batch's included), a forced
# publish, a rollback (Overview's recent activity and a table's "last updated")
MAIN_MOVES = frozenset({Outcome.PUBLISHED, Outcome.FORCED, Outcome.ROLLED_BACK})


class PublishOutcome(_Word):
    """What a publish did (the ``outcome`` of ``publish --json`` and of a pipeline's publish)."""

    PUBLISHED = "published"  # main moved to the branch head (``forced`` says whether over a refusal)
    ALREADY_PUBLISHED = "already_published"  # an earlier publish had put the branch head on main


class RebaseOutcome(_Word):
    """What a rebase did (the ``outcome`` of ``rebase --json``)."""

    REBASED = "rebased"  # the branch's rows were replayed onto current main
    UP_TO_DATE = "up_to_date"  # main had not moved since the fork: nothing to do
