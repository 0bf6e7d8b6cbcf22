"""The one API the faces call: the console's pages and ``app.py``, the CLI, the pipeline API and the
orchestrator integrations.

Start-up and identity are resolved here once, for every face:

* :func:`start` opens the lakehouse of the environment (``WAP_*`` and ``wap.toml``) and checks the
  configured files and folders (a missing one is one line, exit 2); ``background=True`` (the console)
  also starts the recovery tick and the outbox's deliverer;
* :func:`open_context` says who acts: the console's signed-in user when sign-in is on, else (console)
  ``WAP_USER`` / the OS user; the CLI, the pipeline API and the orchestrators (``service=True``) take
  ``WAP_TOKEN``'s user with exactly its role, else ``WAP_USER`` unless the access file says
  ``cli_identity: token`` (:func:`wap_core.workflow.tokens.cli_identity`).

Every action and read then takes the :class:`Context` opened once (the lakehouse and who acts) and calls
the workflow or analysis function that does the work: the bodies here stay thin, the faces never compose
the core themselves. The faces import this module and the base modules (exceptions, identifiers, states,
values, config) only; the result types they show are re-exported below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wap_core import notify
from wap_core.analysis import explore as _explore
from wap_core.analysis.diff import (
    SMALL_CHANGE,
    ChangeGroup,
    ColumnChange,
    ColumnDiff,
    DiffResult,
    change_groups,
    rank_changes,
)
from wap_core.analysis.diff import compute_diff as _compute_diff
from wap_core.analysis.diff import preview as _preview
from wap_core.analysis.explore import (
    CHANGED_ROWS,
    FILTER_OPS,
    MAX_ROWS,
    REF_KINDS,
    VIEW,
    CheckGuide,
    FailingRows,
    ResolvedRef,
    SqlResult,
    json_value,
)
from wap_core.analysis.keyed_diff import ChangedRow, KeyedDiff, KeyedSamples
from wap_core.analysis.keyed_diff import keyed_diff as _keyed_diff
from wap_core.analysis.keyed_diff import keyed_samples as _keyed_samples
from wap_core.checks import AVAILABLE_CHECKS, CheckResult, Level, load_checks
from wap_core.checks.registry import key_columns as check_key_columns
from wap_core.config import Settings
from wap_core.exceptions import WapError
from wap_core.lake import catalog as _cat
from wap_core.lake.catalog import MetadataDiff
from wap_core.lake.errors import is_spark_error, spark_error_line, store_failure_or_probe
from wap_core.lake.profile import ColumnProfile, TableProfile
from wap_core.lake.spark import set_spark_log_level, spark_running
from wap_core.lakehouse import Lakehouse
from wap_core.notify import NotifyConfig, TestOutcome
from wap_core.security.access import AccessPolicy, Decision, Permission
from wap_core.security.paths import SourcePolicy, describe_roots, root_problem, sanitize_filename
from wap_core.security.paths import save_upload as _save_upload
from wap_core.security.tokens import TokenInfo
from wap_core.session import Identity, Session
from wap_core.store.journal import ACTIONS, JournalEntry, StoredAudit
from wap_core.values import Record
from wap_core.workflow import review as _review
from wap_core.workflow import tokens as _tokens
from wap_core.workflow.audit import AuditResult
from wap_core.workflow.audit import latest_audit as _latest_audit
from wap_core.workflow.audit import run_audit as _run_audit
from wap_core.workflow.batch import Batch, BatchTable
from wap_core.workflow.batch import find_batch as _find_batch
from wap_core.workflow.batch import load_batch as _load_batch
from wap_core.workflow.batch import open_batches as _open_batches
from wap_core.workflow.batch_audit import BatchAuditResult
from wap_core.workflow.batch_audit import audit_batch as _audit_batch
from wap_core.workflow.demo import seed_demo as _seed_demo
from wap_core.workflow.discard import BatchDiscardResult, DiscardResult
from wap_core.workflow.discard import discard as _discard
from wap_core.workflow.discard import discard_batch as _discard_batch
from wap_core.workflow.gc import GcResult
from wap_core.workflow.gc import collect_garbage as _collect_garbage
from wap_core.workflow.ingest import (
    Duplicate,
    IngestResult,
    Progress,
    TargetColumn,
    content_hash,
    template_csv,
)
from wap_core.workflow.ingest import find_duplicate as _find_duplicate
from wap_core.workflow.ingest import ingest as _ingest
from wap_core.workflow.ingest import target_columns as _target_columns
from wap_core.workflow.open_branch import OpenedBranch
from wap_core.workflow.open_branch import open_branch as _open_branch
from wap_core.workflow.publish import BatchPublishResult, PublishResult
from wap_core.workflow.publish import publish as _publish
from wap_core.workflow.publish import publish_batch as _publish_batch
from wap_core.workflow.quarantine import QuarantineResult
from wap_core.workflow.quarantine import quarantine as _quarantine
from wap_core.workflow.quarantine_policy import PolicyQuarantine
from wap_core.workflow.quarantine_policy import with_its_quarantine as _with_its_quarantine
from wap_core.workflow.quarantine_view import ExportResult, QuarantineRows, QuarantineSummary
from wap_core.workflow.quarantine_view import export_bytes as _export_bytes
from wap_core.workflow.quarantine_view import export_quarantine as _export_quarantine
from wap_core.workflow.quarantine_view import quarantine_heads as _quarantine_heads
from wap_core.workflow.quarantine_view import quarantine_rows as _quarantine_rows
from wap_core.workflow.quarantine_view import quarantine_summary as _quarantine_summary
from wap_core.workflow.readiness import BatchReadiness, PublishCheck, TableReadiness
from wap_core.workflow.readiness import batch_readiness as _batch_readiness
from wap_core.workflow.readiness import publish_readiness as _publish_readiness
from wap_core.workflow.rebase import BatchRebaseResult, RebaseResult
from wap_core.workflow.rebase import rebase as _rebase
from wap_core.workflow.rebase import rebase_batch as _rebase_batch
from wap_core.workflow.reconcile import Ticker
from wap_core.workflow.reconcile import reconcile as _reconcile
from wap_core.workflow.review import BatchReview, Comment, CommentKind, ReviewState, ReviewStatus
from wap_core.workflow.rollback import (
    BatchRollbackResult,
    BatchRollbackState,
    ReopenResult,
    RollbackResult,
    RolledBackSnapshot,
)
from wap_core.workflow.rollback import batch_rollback_state as _batch_rollback_state
from wap_core.workflow.rollback import batches_taken_off as _batches_taken_off
from wap_core.workflow.rollback import reopen as _reopen
from wap_core.workflow.rollback import rollback as _rollback
from wap_core.workflow.rollback import rollback_batch as _rollback_batch
from wap_core.workflow.rollback import rolled_back_snapshots as _rolled_back_snapshots
from wap_core.workflow.status import BRANCH_STATUSES, BatchRow, BranchInfo, TableInfo, TimelineSnapshot
from wap_core.workflow.status import batch_rows as _batch_rows
from wap_core.workflow.status import list_branches as _list_branches
from wap_core.workflow.status import snapshot_timeline as _snapshot_timeline
from wap_core.workflow.status import table_infos as _table_infos

if TYPE_CHECKING:
    import pandas as pd
    from pyiceberg.table import Table

    from wap_core.analysis import sandbox
    from wap_core.identifiers import TableId
    from wap_core.lake.jobs import QueryHandle

log = logging.getLogger(__name__)

__all__ = [
    "ACTIONS",
    "AVAILABLE_CHECKS",
    "BRANCH_STATUSES",
    "CHANGED_ROWS",
    "FILTER_OPS",
    "MAX_ROWS",
    "REF_KINDS",
    "SMALL_CHANGE",
    "VIEW",
    "AccessPolicy",
    "AuditResult",
    "Batch",
    "BatchAuditResult",
    "BatchDiscardResult",
    "BatchPublishResult",
    "BatchReadiness",
    "BatchRebaseResult",
    "BatchReview",
    "BatchRollbackResult",
    "BatchRollbackState",
    "BatchRow",
    "BatchTable",
    "BranchInfo",
    "ChangeGroup",
    "ChangedRow",
    "CheckGuide",
    "CheckResult",
    "ColumnChange",
    "ColumnDiff",
    "ColumnProfile",
    "Comment",
    "CommentKind",
    "Context",
    "Decision",
    "DiffResult",
    "DiscardResult",
    "Duplicate",
    "ExportResult",
    "FailingRows",
    "GcResult",
    "Identity",
    "IngestResult",
    "JournalEntry",
    "KeyedDiff",
    "KeyedSamples",
    "Lakehouse",
    "Level",
    "MetadataDiff",
    "NotifyConfig",
    "OpenedBranch",
    "Permission",
    "PolicyQuarantine",
    "Progress",
    "PublishCheck",
    "PublishResult",
    "QuarantineResult",
    "QuarantineRows",
    "QuarantineSummary",
    "RebaseResult",
    "ReopenResult",
    "ResolvedRef",
    "ReviewState",
    "ReviewStatus",
    "RollbackResult",
    "RolledBackSnapshot",
    "Session",
    "SourcePolicy",
    "SqlResult",
    "StoredAudit",
    "TableInfo",
    "TableProfile",
    "TableReadiness",
    "TargetColumn",
    "TestOutcome",
    "TimelineSnapshot",
    "TokenInfo",
    "change_groups",
    "check_key_columns",
    "content_hash",
    "describe_roots",
    "is_spark_error",
    "json_value",
    "load_checks",
    "rank_changes",
    "sanitize_filename",
    "set_spark_log_level",
    "spark_error_line",
    "spark_running",
    "template_csv",
]


# --------------------------------------------------------------------------- start-up and identity
Context = Session
"""What every call of the facade acts in, opened once per command (CLI, pipeline) or page run (console): the
lakehouse and who acts (:class:`~wap_core.session.Session`: its ``identity`` is journaled and authorized)."""


def start(home: str | Path | None = None, *, background: bool = False) -> Lakehouse:
    """The start-up of every face: the lakehouse of the environment, its configured files and folders checked
    (a configured path, or an ingest root's bucket, that is not there raises ConfigError naming it).

    ``background`` (the console, a long-running process): recovery runs on a background tick (crashed
    actions are reconciled; reads never repair) and the outbox is delivered, also what exited CLI commands
    left. A CLI command recovers once, before it reads (:func:`recover`)."""
    lh = Lakehouse.from_env(home=home)
    lh.settings.check_configured_paths(probe=root_problem)
    if background:
        Ticker(lh, lh.settings.reconcile_seconds).start()
        notify.start_deliverer(lh.journal, lh.settings)
    return lh


def open_context(
    lh: Lakehouse,
    *,
    service: bool = False,
    signed_in: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Context:
    """Who acts, resolved one way for every face.

    ``service`` (the CLI, the pipeline API and the orchestrators): ``WAP_TOKEN``'s user with exactly its
    role, else ``WAP_USER`` / the OS user unless the access file says ``cli_identity: token``; an unknown,
    expired or revoked token, or a refused bare name, raises RefusedError (journaled). Otherwise (the
    console, a caller's own lakehouse): the signed-in user (``signed_in``, when sign-in is on), else the
    lakehouse's user (``WAP_USER`` or the OS user)."""
    if service:
        return _tokens.cli_identity(lh, env)
    return Session(lh, Identity(signed_in or lh.user))


def recover(
    ctx: Context, table: TableId | str | None = None, *, branch: str | None = None
) -> list[JournalEntry]:
    """Reconcile the pending intents of crashed actions (all, one table's, or one branch's): the recovery step."""
    return _reconcile(ctx.lakehouse, table, branch=branch)


def drain_notifications() -> None:
    """Give the queued notifications their bounded grace period before a short-lived process exits."""
    notify.drain()


def store_failure(exc: BaseException, home: str | Path | None = None) -> str | None:
    """A failure of the object store (down, refused credentials, missing bucket) as one line naming the
    endpoint; None when the store is not to blame or the settings themselves are broken."""
    try:
        settings = Settings.from_env(home=home)
    except WapError:
        return None
    return store_failure_or_probe(exc, settings)


# --------------------------------------------------------------------------- access
def access_policy(ctx: Context) -> AccessPolicy:
    """The roles file as loaded (who holds which role; whether access control is on)."""
    return ctx.policy()


def may(ctx: Context, permission: Permission) -> Decision:
    """Whether who acts holds ``permission`` (no journaling): faces disable a role-gated control with it."""
    return ctx.decide(permission)


def authorize_read(ctx: Context, table: TableId | None = None) -> None:
    """Refuse (RefusedError, journaled) a read by who acts without the READ permission (on ``table``)."""
    ctx.authorize(Permission.READ, table=table)


# --------------------------------------------------------------------------- reads (metadata, no Spark)
def settings(ctx: Context) -> Settings:
    """The settings of the context's lakehouse (paths, catalog, limits)."""
    return ctx.lakehouse.settings


def table_names(ctx: Context) -> list[TableId]:
    """Every table of the catalog."""
    return ctx.lakehouse.tables()


def table_infos(ctx: Context) -> list[TableInfo]:
    """One overview row per table (rows, snapshots, open branches, last update); no Spark."""
    return _table_infos(ctx.lakehouse)


def list_branches(ctx: Context, table: TableId | None = None) -> list[BranchInfo]:
    """The open audit branches (of one table, or all) with their status and review; no Spark."""
    return _list_branches(ctx.lakehouse, table)


def snapshot_timeline(ctx: Context, table: TableId, ref: str = "main") -> list[TimelineSnapshot]:
    """The snapshots of ``ref`` (main by default), newest first, with when main moved to each."""
    return _snapshot_timeline(ctx.lakehouse, table, ref)


def history(
    ctx: Context,
    table: str | None = None,
    *,
    branch: str | None = None,
    action: str | None = None,
    limit: int = 500,
) -> list[JournalEntry]:
    """The journal, newest first (one table's, one branch's, one action's)."""
    return ctx.lakehouse.journal.history(table, branch=branch, action=action, limit=limit)


def pending_intent_on(ctx: Context, table: TableId, branch: str) -> bool:
    """True while an action on ``branch`` has journaled its intent and not yet its outcome."""
    return ctx.lakehouse.journal.pending_intent_on(str(table), branch) is not None


def audit_record(ctx: Context, table: str | None = None, limit: int = 500) -> list[StoredAudit]:
    """The stored audits, newest first (one table's, or all)."""
    return ctx.lakehouse.journal.audit_record(table, limit=limit)


def table(ctx: Context, table: TableId) -> Table:
    """The table's current metadata (an Iceberg table handle, read by the helpers below)."""
    return ctx.lakehouse.table(table)


def branch_names(tbl: Table) -> list[str]:
    """The open audit branches of the table (main and rebase temp branches left out)."""
    return list(_cat.branch_names(tbl))


def ref_snapshot_id(tbl: Table, ref: str) -> int | None:
    """The snapshot a branch or tag points at; None when there is no such ref."""
    return _cat.ref_snapshot_id(tbl, ref)


def require_branch(tbl: Table, table: TableId, branch: str) -> int:
    """The branch's head; NotFoundError naming the open branches when it is not there."""
    return _cat.require_branch(tbl, table, branch)


def metadata_diff(tbl: Table, table: TableId, branch: str) -> MetadataDiff:
    """The metadata-only look at ``branch`` against main (refs, fork point, pure append); no Spark."""
    return _cat.metadata_diff(tbl, table, branch)


def column_names(tbl: Table) -> list[str]:
    """The table's current column names, in schema order."""
    return [f.name for f in tbl.schema().fields]


def snapshot_times(tbl: Table) -> list[tuple[int, int]]:
    """Every snapshot of the table as (snapshot id, written at in epoch ms), newest first."""
    snaps = sorted(tbl.metadata.snapshots, key=lambda s: -s.timestamp_ms)
    return [(s.snapshot_id, s.timestamp_ms) for s in snaps]


def refs_of(tbl: Table) -> dict[str, list[str]]:
    """The table's branches, tags and snapshots as the Explore page offers them."""
    return _explore.refs_of(tbl)


def resolve_ref(tbl: Table, table: TableId, kind: str, value: str | int | datetime) -> ResolvedRef:
    """A branch, tag, snapshot id or point in time resolved to one snapshot."""
    return _explore.resolve_ref(tbl, table, kind, value)


def resolve_any_ref(tbl: Table, table: TableId, ref: str) -> ResolvedRef:
    """``ref`` (a branch, a tag, a snapshot id or an ISO time) resolved to one snapshot."""
    return _explore.resolve_any_ref(tbl, table, ref)


def schema_rows(tbl: Table, snapshot_id: int) -> list[Record]:
    """The schema at ``snapshot_id``, one row per column."""
    return _explore.schema_rows(tbl, snapshot_id)


def check_guides(ctx: Context, table: TableId) -> dict[str, CheckGuide]:
    """How each check of the table's suite can be looked into (its failing rows, the table that fixes it)."""
    return _explore.check_guides(ctx.lakehouse, table)


def latest_audit(ctx: Context, table: TableId, branch: str) -> AuditResult | None:
    """The stored audit of the branch's newest audited head; None when never audited."""
    return _latest_audit(ctx.lakehouse, table, branch)


def publish_readiness(
    ctx: Context, table: TableId, branch: str, tbl: Table | None = None, *, alone: bool = True
) -> PublishCheck:
    """Whether ``branch`` may be published now, and why not (``alone=False``: as a table of its batch)."""
    return _publish_readiness(ctx.lakehouse, table, branch, tbl, alone=alone)


def review_state(ctx: Context, table: TableId, branch: str, tbl: Table | None = None) -> ReviewStatus:
    """The review of the branch's head: approvals, requests for changes, the table's policy."""
    return _review.review_state(ctx.lakehouse, table, branch, tbl)


def approve_decision(ctx: Context, table: TableId, branch: str) -> tuple[bool, str]:
    """Whether who acts may approve the branch (role and the author rule), with the reason."""
    return _review.approve_decision(ctx.lakehouse, table, branch, ctx.user)


def comments(ctx: Context, table: TableId, branch: str) -> list[Comment]:
    """The branch's review thread (READ permission)."""
    return _review.comments(ctx.lakehouse, table, branch, user=ctx.user)


def rolled_back_snapshots(ctx: Context, table: TableId) -> list[RolledBackSnapshot]:
    """Snapshots main no longer holds since a rollback (candidates to reopen)."""
    return _rolled_back_snapshots(ctx.lakehouse, table)


def target_columns(ctx: Context, table: TableId) -> tuple[TargetColumn, ...]:
    """The table's columns an ingest must fit (name, type, required, doc)."""
    return _target_columns(ctx.lakehouse, table)


def find_duplicate(ctx: Context, table: TableId, digest: str) -> Duplicate | None:
    """A ref of the table that already holds a batch with this content hash; None otherwise."""
    return _find_duplicate(ctx.lakehouse, table, digest)


def review_url(ctx: Context, table: TableId | str, branch: str) -> str:
    """The console's Review page of the branch (``console_url`` of the notifications file)."""
    return notify.review_link(notify.config_for(ctx.lakehouse.settings).console_url, str(table), branch)


# --------------------------------------------------------------------------- reads (Spark)
def start_spark(ctx: Context) -> None:
    """Build (or join) the process's one SparkSession."""
    ctx.lakehouse.spark  # noqa: B018 - the property builds the session


def compute_diff(ctx: Context, table: TableId, branch: str) -> DiffResult:
    """The Spark profile diff of ``branch`` against main, in who acts's FAIR pool."""
    return _compute_diff(ctx.lakehouse, table, branch, user=ctx.user)


def preview(ctx: Context, table: TableId, branch: str, limit: int = 100) -> pd.DataFrame:
    """The first ``limit`` rows the branch added."""
    return _preview(ctx.lakehouse, table, branch, limit=limit)


def keyed_diff(
    ctx: Context,
    table: TableId,
    branch: str,
    key: Sequence[str],
    *,
    exclude: Sequence[str] = (),
    columns: Sequence[str] | None = None,
) -> KeyedDiff:
    """The keyed row diff of ``branch`` against main at its fork, by ``key``."""
    return _keyed_diff(ctx.lakehouse, table, branch, key, exclude=exclude, columns=columns, user=ctx.user)


def keyed_samples(
    ctx: Context, table: TableId, branch: str, key: Sequence[str], limit: int = 10
) -> KeyedSamples:
    """Sample rows added, removed and changed by ``key``."""
    return _keyed_samples(ctx.lakehouse, table, branch, key, limit, user=ctx.user)


def rows(
    ctx: Context,
    table: TableId,
    snapshot_id: int,
    filters: list[tuple[str, str, Any]] | None = None,
    limit: int = 200,
) -> pd.DataFrame:
    """Rows of the table at ``snapshot_id``, filtered by (column, op, value) triples."""
    return _explore.rows(ctx.lakehouse, table, snapshot_id, filters, limit, user=ctx.user)


def submit_query(
    ctx: Context, table: TableId, snapshot_id: int, sql: str, *, alive: Callable[[], bool] | None = None
) -> QueryHandle[pd.DataFrame] | sandbox.SandboxQuery[pd.DataFrame]:
    """The SQL box: one read-only query started in the background (``.cancel()``, ``.result(timeout)``)."""
    return _explore.submit_query(ctx.lakehouse, table, snapshot_id, sql, user=ctx.user, alive=alive)


def submit_failing_rows(
    ctx: Context, table: TableId, branch: str, check: str, *, alive: Callable[[], bool] | None = None
) -> QueryHandle[FailingRows]:
    """The failing rows of one check on ``branch``, read in the background."""
    return _explore.submit_failing_rows(ctx.lakehouse, table, branch, check, user=ctx.user, alive=alive)


def bounded_query_rows(ctx: Context, table: TableId, snapshot_id: int, sql: str, *, limit: int) -> SqlResult:
    """One read-only query (the CLI's ``query``): at most ``limit`` rows, with whether more exist."""
    return _explore.bounded_query_rows(ctx.lakehouse, table, snapshot_id, sql, limit=limit)


# --------------------------------------------------------------------------- actions
def seed_demo(ctx: Context, *, force: bool = False) -> list[str]:
    """Seed the demo lakehouse (nycflights13); refused when it has tables, unless ``force``."""
    return _seed_demo(ctx, force=force)


def ingest(
    ctx: Context,
    table: TableId,
    sources: Sequence[str],
    *,
    branch: str | None = None,
    batch: str | None = None,
    fmt: str | None = None,
    create: bool = False,
    source_policy: SourcePolicy = SourcePolicy.CONFINED,
    progress: Progress | None = None,
    replay_of: str | None = None,
) -> IngestResult:
    """Write ``sources`` into a new audit branch of ``table`` (of the batch ``batch``) and audit it, as who acts.

    ``replay_of``: the batch whose quarantined rows these sources replace (marked replayed with this batch)."""
    return _ingest(
        ctx,
        table,
        sources,
        branch=branch,
        batch=batch,
        fmt=fmt,
        create=create,
        source_policy=source_policy,
        progress=progress,
        replay_of=replay_of,
    )


def save_upload(ctx: Context, filename: str, data: bytes) -> Path:
    """Write an uploaded file into its own new batch folder under the uploads root."""
    return _save_upload(ctx.lakehouse.settings, filename, data)


def run_audit(ctx: Context, table: TableId, branch: str) -> AuditResult:
    """(Re-)audit the branch's head, as who acts."""
    return _run_audit(ctx, table, branch)


def audit_batch(ctx: Context, name: str) -> BatchAuditResult:
    """(Re-)audit the open batch ``name`` as who acts: only its stale audits run; the worst table's status."""
    return _audit_batch(ctx, name)


def publish(
    ctx: Context, table: TableId, branch: str, *, force: bool = False, reason: str | None = None
) -> PublishResult:
    """Publish the audited branch head to main (``force`` needs a reason), as who acts."""
    return _publish(ctx, table, branch, force=force, reason=reason)


def rebase(ctx: Context, table: TableId, branch: str) -> RebaseResult:
    """Rebase the branch onto main's head and audit the new head, as who acts."""
    return _rebase(ctx, table, branch)


def rebase_batch(ctx: Context, name: str) -> BatchRebaseResult:
    """Rebase every table's branch of the batch ``name`` onto its main, all or none, then re-audit it, as who acts."""
    return _rebase_batch(ctx, name)


def quarantine(
    ctx: Context, table: TableId, branch: str, *, checks: Sequence[str] = (), reason: str
) -> QuarantineResult:
    """Move the failing rows of the branch's batch to the table's quarantine table, then re-audit, as who acts."""
    return _quarantine(ctx, table, branch, checks=tuple(checks), reason=reason)


def with_its_quarantine(ctx: Context, table: TableId, branch: str) -> bool:
    """Whether the branch is a one-table batch only its own quarantine table joined (published, waited for
    and discarded as that batch)."""
    return _with_its_quarantine(ctx.lakehouse, table, branch)


def quarantine_heads(ctx: Context, table: TableId) -> tuple[tuple[str, int], ...]:
    """The quarantine table's refs and their snapshots (metadata only): the key of its Spark reads (READ)."""
    ctx.authorize(Permission.READ, table=table)
    return _quarantine_heads(ctx.lakehouse, table)


def quarantine_summary(ctx: Context, table: TableId) -> QuarantineSummary:
    """Per batch and check, how many rows the quarantine table of ``table`` keeps (READ on the table)."""
    ctx.authorize(Permission.READ, table=table)
    return _quarantine_summary(ctx.lakehouse, table, user=ctx.user)


def quarantine_rows(
    ctx: Context, table: TableId, *, batch: str | None = None, check: str | None = None, limit: int = 1000
) -> QuarantineRows:
    """The first ``limit`` quarantined rows of ``table`` (of ``batch``, failing ``check``), newest first."""
    ctx.authorize(Permission.READ, table=table)
    return _quarantine_rows(ctx.lakehouse, table, batch=batch, check=check, limit=limit, user=ctx.user)


def export_quarantine(
    ctx: Context,
    table: TableId,
    *,
    fmt: str,
    path: str | Path,
    batch: str | None = None,
    check: str | None = None,
) -> ExportResult:
    """Write the quarantined rows of ``table`` (of ``batch``) to ``path`` as CSV or Parquet (READ on the table)."""
    ctx.authorize(Permission.READ, table=table)
    return _export_quarantine(
        ctx.lakehouse, table, fmt=fmt, path=path, batch=batch, check=check, user=ctx.user
    )


def quarantine_export_bytes(
    ctx: Context, table: TableId, *, fmt: str, batch: str | None = None, check: str | None = None
) -> bytes:
    """The quarantined rows of ``table`` (of ``batch``, failing ``check``) as one CSV or Parquet file's bytes."""
    ctx.authorize(Permission.READ, table=table)
    return _export_bytes(ctx.lakehouse, table, fmt=fmt, batch=batch, check=check, user=ctx.user)


def discard(ctx: Context, table: TableId, branch: str, *, reason: str | None = None) -> DiscardResult:
    """Discard the branch (main untouched), as who acts."""
    return _discard(ctx, table, branch, reason=reason)


def approve(ctx: Context, table: TableId, branch: str, *, comment: str | None = None) -> ReviewStatus:
    """Approve the branch's head, as who acts."""
    return _review.approve(ctx, table, branch, comment=comment)


def request_changes(ctx: Context, table: TableId, branch: str, *, comment: str) -> ReviewStatus:
    """Request changes on the branch's head, as who acts."""
    return _review.request_changes(ctx, table, branch, comment=comment)


def approve_batch(ctx: Context, name: str, *, comment: str | None = None) -> BatchReview:
    """Approve every table of the batch ``name`` at once, bound to its tables' heads, as who acts."""
    return _review.approve_batch(ctx, name, comment=comment)


def request_changes_batch(ctx: Context, name: str, *, comment: str) -> BatchReview:
    """Request changes on every table of the batch ``name`` at once, as who acts."""
    return _review.request_changes_batch(ctx, name, comment=comment)


def add_comment(ctx: Context, table: TableId, branch: str, text: str, *, check: str | None = None) -> Comment:
    """Add a comment to the branch's thread (optionally about one check), as who acts."""
    return _review.add_comment(ctx, table, branch, text, check=check)


def rollback(
    ctx: Context, table: TableId, to_snapshot: int, *, reason: str, expected_main: int | None = None
) -> RollbackResult:
    """Move main back to ``to_snapshot`` (admin), as who acts."""
    return _rollback(ctx, table, to_snapshot, reason=reason, expected_main=expected_main)


def rollback_batch(ctx: Context, name: str, *, reason: str) -> BatchRollbackResult:
    """Move every table of the published batch ``name`` back to its main before that publish, all or none
    (admin), as who acts."""
    return _rollback_batch(ctx, name, reason=reason)


def batches_taken_off(ctx: Context, table: TableId, to_snapshot: int) -> list[BatchRollbackState]:
    """The multi-table batches whose publish rolling ``table``'s main back to ``to_snapshot`` would undo on
    this table alone, each with whether the batch's own rollback may run (read only)."""
    return _batches_taken_off(ctx.lakehouse, table, to_snapshot)


def batch_rollback_state(ctx: Context, name: str) -> BatchRollbackState | None:
    """The newest publish of batch ``name`` and whether it may be rolled back now (None: never published);
    read without journaling: :func:`rollback_batch` decides again."""
    return _batch_rollback_state(ctx.lakehouse, name)


def reopen(
    ctx: Context,
    table: TableId,
    snapshot_id: int,
    *,
    branch: str | None = None,
    again: bool = False,
    reason: str | None = None,
) -> ReopenResult:
    """Reopen a rolled-back snapshot as a new branch (steward), as who acts."""
    return _reopen(ctx, table, snapshot_id, branch=branch, again=again, reason=reason)


def open_branch(
    ctx: Context, table: TableId, *, branch: str | None = None, batch: str | None = None
) -> OpenedBranch:
    """Open a branch for the acting user's own Spark job (created at main's head, or taken over), as who acts."""
    return _open_branch(ctx, table, branch=branch, batch=batch)


def collect_garbage(
    ctx: Context,
    *,
    older_than: timedelta | str | None = None,
    dry_run: bool = False,
    tables: Iterable[TableId] | None = None,
) -> GcResult:
    """Apply the retention rules (branch TTL, snapshot expiry), as who acts (admin)."""
    return _collect_garbage(ctx, older_than=older_than, dry_run=dry_run, tables=tables)


def create_token(ctx: Context, token_user: str, role: str, expires: str = "30d") -> tuple[str, TokenInfo]:
    """Create a service token (admin); the token is returned once, only its SHA-256 is stored."""
    return _tokens.create_token(ctx, token_user, role, expires)


def list_tokens(ctx: Context) -> list[TokenInfo]:
    """The service tokens (admin)."""
    return _tokens.list_tokens(ctx)


def revoke_token(ctx: Context, token_id: int) -> TokenInfo:
    """Revoke a service token (admin)."""
    return _tokens.revoke_token(ctx, token_id)


def notify_test(ctx: Context) -> tuple[NotifyConfig, list[TestOutcome]]:
    """Send a test event to every notification target (``notify-test``)."""
    return notify.notify_test(ctx.lakehouse.settings, user=ctx.user)


# ----- batches that span tables ---------------------------------------------
def batch(ctx: Context, name: str) -> Batch:
    """The open batch ``name`` (NotFoundError if none)."""
    return _load_batch(ctx.lakehouse, name)


def find_batch(ctx: Context, name: str) -> Batch | None:
    """The open batch ``name``, or None (a plain branch, or no such batch)."""
    return _find_batch(ctx.lakehouse, name)


def open_batches(ctx: Context) -> list[Batch]:
    """Every open batch of recorded members, by name."""
    return _open_batches(ctx.lakehouse)


def batch_readiness(ctx: Context, name: str) -> BatchReadiness:
    """Whether the batch ``name`` may be published now, table by table."""
    return _batch_readiness(ctx.lakehouse, name)


def batch_rows(ctx: Context) -> list[BatchRow]:
    """Every open batch as one row of the Branches page: tables, worst status, rows added (metadata only)."""
    return _batch_rows(ctx.lakehouse)


def publish_batch(
    ctx: Context, name: str, *, force: bool = False, reason: str | None = None
) -> BatchPublishResult:
    """Publish every table of the batch ``name``, all or none (``force`` needs a reason), as who acts."""
    return _publish_batch(ctx, name, force=force, reason=reason)


def discard_batch(ctx: Context, name: str, *, reason: str | None = None) -> BatchDiscardResult:
    """Discard every table's branch of the batch ``name`` (mains untouched), as who acts."""
    return _discard_batch(ctx, name, reason=reason)
