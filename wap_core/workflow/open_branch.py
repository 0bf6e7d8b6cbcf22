"""Open a branch for a user's own Spark job: ``wap branch open`` and ``pipeline.open_branch``.

Ingest writes its sources itself; real pipelines write the branch with their own Spark job (``MERGE
INTO``, ``UPDATE``, ``DELETE``, ``INSERT OVERWRITE``, appends). This step comes before that job:

- a new branch is created at main's head (a ref move: intent, Iceberg commit, outcome ``opened``,
  reconciled after a crash like every other move), optionally as a member of a batch (``--batch``);
- an existing branch (written by a job that never opened it) is **taken over**: no ref moves, the
  journal records the user as its author (``taken_over``), so four-eyes review can tell who wrote it;
- the result says how the job writes there: ``spark.wap.branch`` (Iceberg's WAP setting; MERGE,
  UPDATE and DELETE included) or the ``branch_<name>`` identifier. ``spark.sql.iceberg.branch.name``
  is not an Iceberg setting: writes under it go to main (docs/pipelines.md).

The user who opens (the pipeline's service identity) is the batch's author: the journal's
``open`` rows count as writes for :func:`wap_core.workflow.review.authors`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pyiceberg.table.refs import SnapshotRefType

from wap_core.exceptions import CommitConflictError, ConflictError, RefusedError
from wap_core.identifiers import MAIN, TableId, validate_branch
from wap_core.lake import catalog as cat
from wap_core.lake.refs import create_branch_at
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import Action, Outcome
from wap_core.store.journal import Intent
from wap_core.values import Record
from wap_core.workflow.batch import branch_for, refuse_a_join_in_flight, refuse_a_published_name
from wap_core.workflow.batch import join as join_batch
from wap_core.workflow.reconcile import reconciled_table
from wap_core.workflow.refmove import Moved, RefMove
from wap_core.workflow.review import authors_of, is_author

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

WAP_BRANCH_SETTING = "spark.wap.branch"
WAP_ENABLED = "write.wap.enabled"  # the table property Iceberg's spark.wap.branch needs


@dataclass(frozen=True)
class OpenedBranch:
    """What a job needs to write the branch, and what the open did (``wap branch open --json``)."""

    table: str
    branch: str
    batch: str | None
    outcome: Outcome  # opened (created now), taken_over (an existing branch, its author journaled) or refused
    head: int  # the branch's head now (main's head for a new branch)
    user: str  # the author the journal now names
    spark_conf: Record  # set these on the job's SparkSession: every write to the table goes to the branch
    identifier: str  # or write to this identifier in Spark SQL (no session setting needed)
    dataframe_name: str  # the same, unquoted, for DataFrame APIs (``df.writeTo(...)``)
    # the table properties spark.wap.branch needs that the table does not have yet (Iceberg ignores the setting
    # unless write.wap.enabled=true: the job's writes would go to main); none for the identifier
    table_properties: Record = field(default_factory=dict)
    note: str = ""


def default_name(now: datetime | None = None) -> str:
    """A fresh branch name for a job: ``job_<UTC time>``."""
    return f"job_{(now or datetime.now(UTC)).strftime('%Y%m%d_%H%M%S_%f')}"


def open_branch(
    session: Session | Lakehouse,
    table: TableId,
    *,
    branch: str | None = None,
    batch: str | None = None,
    user: str | None = None,
) -> OpenedBranch:
    """Open ``branch`` of ``table`` for the acting user's Spark job (the INGEST permission): create it at main's
    head, or take over an existing branch (journaled). ``batch``: join that open batch (the branch is named
    like it). Refused: a tag of that name, a table with no main yet (nothing to branch from)."""
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    name = branch_for(branch, batch) or default_name()
    validate_branch(name)
    s.authorize(Permission.INGEST, table=table, branch=name, action=Action.OPEN)
    if batch is not None:
        refuse_a_published_name(s, Action.OPEN, table, batch)
    tbl = reconciled_table(lh, table)
    main_head = cat.ref_snapshot_id(tbl, MAIN)
    ref = tbl.metadata.refs.get(name)
    move = RefMove(s, Action.OPEN, table, name, None, main_head, details={"batch": batch} if batch else {})
    if ref is not None and ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise move.refuse(RefusedError(f"open refused: {table} has a tag named {name!r}", "exists"))
    if ref is not None:
        return _take_over(s, table, tbl, name, batch, ref.snapshot_id)
    if main_head is None:
        raise move.refuse(
            RefusedError(
                f"open refused: {table} has no snapshot on main to branch from (ingest its first batch)",
                "empty",
            )
        )
    intent = move.begin()
    if batch is not None:  # the branch is reserved (the intent holds it): the table joins the batch
        join_batch(lh, batch, table, user)

    def commit(_: Intent) -> Moved:
        if batch is not None:  # refused (journaled, no branch made) if the batch's publish is in flight
            refuse_a_join_in_flight(lh, batch, table)
        try:
            create_branch_at(lh.catalog, table, name, main_head, tbl)
        except CommitConflictError as exc:
            raise ConflictError(f"open of {table} {name} lost a race with another change ({exc})") from exc
        return Moved(Outcome.OPENED, main_head)

    move.run(commit, intent=intent)
    return _opened(lh, table, name, batch, Outcome.OPENED, main_head, user)


def _take_over(
    s: Session, table: TableId, tbl: Table, name: str, batch: str | None, head: int
) -> OpenedBranch:
    """An existing branch: the acting user is journaled as its author (no ref moves); already one: nothing new."""
    lh, user = s.lakehouse, s.user
    if batch is not None:
        join_batch(lh, batch, table, user)
    before = authors_of(lh, table, name)
    if is_author(user, before):
        return _opened(lh, table, name, batch, Outcome.OPENED, head, user, "already open by this user")
    note = (
        f"taken over from {', '.join(before)}"
        if before
        else "taken over: written by a job that did not open it (its author was unknown)"
    )
    s.record(
        Action.OPEN,
        Outcome.TAKEN_OVER,
        table=str(table),
        branch=name,
        snapshot_before=head,
        snapshot_after=head,
        details={"previous_authors": list(before), **({"batch": batch} if batch else {})},
    )
    log.info("%s took over %s %s (%s)", user, table, name, note)
    return _opened(lh, table, name, batch, Outcome.TAKEN_OVER, head, user, note)


def _opened(
    lh: Lakehouse,
    table: TableId,
    name: str,
    batch: str | None,
    outcome: Outcome,
    head: int,
    user: str,
    note: str = "",
) -> OpenedBranch:
    wap_enabled = str(lh.table(table).properties.get(WAP_ENABLED, "false")).lower() == "true"
    return OpenedBranch(
        table=str(table),
        branch=name,
        batch=batch,
        outcome=outcome,
        head=head,
        user=user,
        spark_conf={WAP_BRANCH_SETTING: name},
        identifier=lh.sql_name(table, name),
        dataframe_name=lh.spark_name(table, name),
        table_properties={} if wap_enabled else {WAP_ENABLED: "true"},
        note=note,
    )
