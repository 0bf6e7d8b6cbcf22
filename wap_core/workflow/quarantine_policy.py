"""``on_fail: quarantine``: an ingest repairs its own batch (the counterpart of DLT's ``expect_or_drop``, but
nothing is dropped).

A check of the checks file may say ``on_fail: quarantine`` (row-level checks only; parsed in
:mod:`wap_core.checks.parsing`). When an ingest's audit fails such a check, :func:`apply_policy` (called by
:func:`wap_core.workflow.ingest.ingest` right after its audit) moves that check's failing rows out of the
batch into the table's quarantine table with :func:`wap_core.workflow.quarantine.quarantine` (the one
quarantine: its intent, its journal row, its crash safety, its re-audit), as the ingesting user, with the
reason ``on_fail: quarantine (check NAME)``. The branch's head is then the batch without those rows,
audited again; the quarantine table joined the batch, so the good rows publish with the kept ones (``wap
publish --batch BRANCH``; the pipeline API's one-table steps do it by themselves). Failing checks without
the policy still fail the audit, as before.

Authorization stays in :mod:`wap_core.security.access`: the policy quarantine is a quarantine by the
ingesting user, authorized as :attr:`~wap_core.security.access.Permission.QUARANTINE` (steward, the role
ingest needs too). A user who may ingest but not quarantine (a token or a rule that allows less) gets the
refusal journaled and notified as any refused quarantine; the ingest stands (its rows are on the branch,
its audit failed, exactly as without the policy) and its result says ``refused`` with the reason. Any
other refusal of the quarantine (a lost race, a quarantine table whose schema does not fit) is reported the
same way; an error that is not a refusal is raised after the ingest's audit was announced.

Notifications: while an ingest's suite has such a check, its audit is not announced at once
(``announce=False``); when the policy quarantines, ONE ``quarantined`` event goes out (the counts per check,
the quarantine table, the re-audit's status and still-failing checks, a link to the Quarantine page
``/quarantine?table=T&batch=B``), then the re-audit is announced as any audit is (``audit_failed`` when
other checks still fail, ``awaiting_approval`` when the policy needs approvals). When it does not quarantine
(no such check failed, or refused), the ingest's audit is announced as it would have been.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from wap_core.checks import Suite
from wap_core.exceptions import RefusedError
from wap_core.identifiers import TableId
from wap_core.notify import Event
from wap_core.session import Session
from wap_core.states import CheckStatus, OnFail, Outcome
from wap_core.values import JSON, JsonOrder, omit_none
from wap_core.workflow.audit import AuditResult, announce_audit
from wap_core.workflow.batch import batch_of
from wap_core.workflow.quarantine import QuarantineResult, quarantine, quarantine_table_id

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

POLICY = "on_fail: quarantine"


@dataclass(frozen=True)
class PolicyQuarantine:
    """What an ingest's ``on_fail: quarantine`` checks did (the ``quarantine`` key of the ingest's JSON).

    ``outcome`` ``quarantined`` (``checks``: rows per check, a row failing two counting in both;
    ``quarantined``: rows, each once; ``old_head`` the ingest's head, ``new_head`` the repaired one) or
    ``refused`` (``refused``: the one-line reason, ``code`` its code; nothing moved).
    """

    __json__: ClassVar[JsonOrder] = (
        "policy",
        "outcome",
        "failed_checks",
        "quarantine_table",
        "checks",
        "quarantined",
        "rows_before",
        "rows_after",
        "old_head",
        "new_head",
        "reason",
        ...,
    )

    outcome: Outcome  # QUARANTINED or REFUSED
    failed_checks: tuple[str, ...]  # the ingest audit's failed checks that say on_fail: quarantine
    quarantine_table: str
    reason: str
    old_head: int
    checks: dict[str, int] = field(default_factory=dict)
    quarantined: int = 0
    rows_before: int | None = None
    rows_after: int | None = None
    new_head: int | None = None
    refused: str | None = field(default=None, metadata={JSON: omit_none})
    code: str | None = field(default=None, metadata={JSON: omit_none})

    @property
    def policy(self) -> str:
        """``on_fail: quarantine``."""
        return POLICY


def policy_checks(suite: Suite) -> tuple[str, ...]:
    """The names of the suite's checks that say ``on_fail: quarantine``."""
    return tuple(c.name for c in suite.checks if c.on_fail is OnFail.QUARANTINE)


def policy_reason(checks: tuple[str, ...]) -> str:
    """The quarantine's reason: ``on_fail: quarantine (check X)`` (``checks X, Y`` for several)."""
    return f"{POLICY} (check{'s' if len(checks) > 1 else ''} {', '.join(checks)})"


def apply_policy(
    s: Session, table: TableId, branch: str, suite: Suite, audit: AuditResult
) -> tuple[AuditResult, PolicyQuarantine | None]:
    """After an ingest's audit of ``branch``: quarantine the failing rows of its failed ``on_fail: quarantine``
    checks (as the session's user) and return the branch's audit now and what the policy did (None: the suite
    has no such check, or none failed). The ingest ran its audit with ``announce=announces_at_once(suite)``."""
    lh = s.lakehouse
    names = set(policy_checks(suite))
    if not names:
        return audit, None  # announced by the audit itself
    failing = tuple(c.name for c in audit.checks if c.name in names and c.status is CheckStatus.FAILED)
    if not failing:
        announce_audit(lh, audit)
        return audit, None
    reason = policy_reason(failing)
    qid = str(quarantine_table_id(table))
    try:
        q = quarantine(s, table, branch, checks=failing, reason=reason)
    except RefusedError as exc:  # journaled (and notified) by the quarantine's refusal path
        log.warning("ingest into %s %s: %s not applied: %s", table, branch, POLICY, exc)
        announce_audit(lh, audit)
        return audit, PolicyQuarantine(
            Outcome.REFUSED,
            failing,
            qid,
            reason,
            audit.snapshot_id,
            refused=str(exc),
            code=exc.reason_code,
        )
    except Exception:
        announce_audit(lh, audit)  # the ingest's failed audit is still told, then the error is raised
        raise
    assert q.audit is not None
    done = PolicyQuarantine(
        Outcome.QUARANTINED,
        failing,
        qid,
        reason,
        q.old_head,
        checks=dict(q.checks),
        quarantined=q.quarantined,
        rows_before=q.rows_before,
        rows_after=q.rows_after,
        new_head=q.new_head,
    )
    _notify(s, q, done)
    return q.audit, done


def _notify(s: Session, q: QuarantineResult, done: PolicyQuarantine) -> None:
    """The ``quarantined`` event: the counts, the quarantine table, the re-audit; its link the Quarantine page."""
    assert q.audit is not None
    per = ", ".join(f"{name}: {n}" for name, n in q.checks.items())
    still = q.audit.failed_checks
    s.notify(
        Event.QUARANTINED,
        table=q.table,
        branch=q.branch,
        user=s.user,
        status=q.audit.status.value,
        failed_checks=still,
        summary=f"ingest of {q.table} {q.branch}: {q.quarantined} of {q.rows_before} rows quarantined into "
        f"{q.quarantine_table} by {POLICY} ({per}); the audit again: {q.audit.status}"
        + (f" ({', '.join(still)} still failing)" if still else ""),
        snapshot_id=q.new_head,
        quarantine={
            "checks": dict(q.checks),
            "quarantined": q.quarantined,
            "quarantine_table": q.quarantine_table,
            "rows_before": q.rows_before,
            "rows_after": q.rows_after,
        },
    )


def announces_at_once(suite: Suite) -> bool:
    """Whether an ingest's audit is announced at once (``announce=``): not while the suite may quarantine
    (:func:`apply_policy` announces it, or the repaired branch's audit, afterwards)."""
    return not policy_checks(suite)


def with_its_quarantine(lh: Lakehouse, table: TableId, branch: str) -> bool:
    """Whether ``branch`` of ``table`` is a one-table batch that only its own quarantine table joined (a
    quarantine of a plain branch): the pipeline API's one-table steps then act on that batch."""
    b = batch_of(lh, table, branch)
    return b is not None and set(b.table_ids) == {table, quarantine_table_id(table)}
