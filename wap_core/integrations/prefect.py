"""Prefect 3 tasks and a flow for Write-Audit-Publish (``wap-console[prefect]``).

The flow runs its steps inside one Prefect transaction: when any step after the write fails (a failed
audit nobody decided on in time, a batch a person rejected, a publish the guard refused, an error), the
transaction rolls back and the ingest task's rollback hook discards the branch, so the batch never lingers
(the reference design's "outer layer"). Main is only ever moved by the publish, the last step.

::

    from wap_core.integrations.prefect import wap_flow
    wap_flow("demo.orders", ["/landing/orders.csv"], wait_timeout=3600, poll=60)

A batch that spans tables, ``wap_batch_flow([(table, sources), ...])``: one ingest task per pair (each
rolled back on its own), then the batch's audit, wait and publish (every table's main, or none).

Each task acts as the service identity ``WAP_USER`` on the lakehouse of the environment.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.transactions import Transaction, get_transaction, transaction

from wap_core import pipeline
from wap_core.values import JsonObject, to_jsonable

log = logging.getLogger(__name__)

BRANCH_KEY = "wap_branch"  # the ingest task's transaction value its rollback hook reads


@task(name="wap-ingest", cache_policy=NO_CACHE)  # type: ignore[untyped-decorator]
def ingest_task(
    table: str,
    sources: Sequence[str],
    create: bool = False,
    branch: str | None = None,
    batch: str | None = None,
) -> JsonObject:
    """Write the batch into a new audit branch (and audit it); its rollback discards the branch.

    ``batch``: the table joins the open batch of that name (its branch named like it)."""
    b = pipeline.ingest(table, list(sources), create=create, branch=branch, batch=batch)
    txn = get_transaction()
    if txn is not None:
        txn.set(BRANCH_KEY, to_jsonable(b))
    get_run_logger().info(
        "ingested %s rows into %s %s: audit %s", b.rows_written, b.table, b.branch, b.status
    )
    return to_jsonable(b)


@ingest_task.on_rollback  # type: ignore[untyped-decorator]
def _discard_on_rollback(txn: Transaction) -> None:
    b = txn.get(BRANCH_KEY, None)
    if b is None:
        return
    discarded = pipeline.discard(b["table"], b["branch"], reason="prefect: the flow failed after the write")
    log.info(
        "rolled back: %s %s %s", b["table"], b["branch"], "discarded" if discarded else "was gone already"
    )


@task(name="wap-open-branch", cache_policy=NO_CACHE)  # type: ignore[untyped-decorator]
def open_branch_task(table: str, branch: str | None = None, batch: str | None = None) -> JsonObject:
    """Open a branch for the flow's own Spark task (its ``identifier`` / ``spark_conf`` say how to write there);
    its rollback discards the branch, as an ingest's does. Then :func:`audit_task` and the steps after it."""
    opened = to_jsonable(pipeline.open_branch(table, branch=branch, batch=batch))
    txn = get_transaction()
    if txn is not None:
        txn.set(BRANCH_KEY, opened)
    get_run_logger().info("%s %s %s", opened["outcome"], opened["table"], opened["branch"])
    return opened


@open_branch_task.on_rollback  # type: ignore[untyped-decorator]
def _discard_opened_on_rollback(txn: Transaction) -> None:
    _discard_on_rollback(txn)


@task(name="wap-audit", cache_policy=NO_CACHE)  # type: ignore[untyped-decorator]
def audit_task(table: str, branch: str, require_pass: bool = False) -> JsonObject:
    """(Re-)audit the branch; ``require_pass`` raises on a failed audit (exit code 1)."""
    return to_jsonable(pipeline.audit(table, branch, require_pass=require_pass))


@task(name="wap-decision", cache_policy=NO_CACHE)  # type: ignore[untyped-decorator]
def decision_task(table: str, branch: str, timeout: float, poll: float) -> str:
    """Wait for the console (journal and reviews only); raises unless the batch may be published."""
    d = pipeline.wait_for_decision(table, branch, timeout, poll)
    get_run_logger().info("decision on %s %s: %s", table, branch, d)
    return pipeline.require_go(d, table, branch).value


@task(name="wap-publish", cache_policy=NO_CACHE)  # type: ignore[untyped-decorator]
def publish_task(table: str, branch: str) -> JsonObject:
    """Publish if the audit and the review policy allow it (never forced)."""
    return to_jsonable(pipeline.publish_if_passed(table, branch))


@flow(name="wap")  # type: ignore[untyped-decorator]
def wap_flow(
    table: str,
    sources: list[str],
    create: bool = False,
    wait_timeout: float = 0.0,
    poll: float = pipeline.DEFAULT_POLL,
) -> JsonObject:
    """Ingest → audit → wait for a decision (up to ``wait_timeout`` s) → publish, all or nothing."""
    with transaction():
        b = ingest_task(table, sources, create=create)
        audit_task(b["table"], b["branch"])
        decision_task(b["table"], b["branch"], wait_timeout, poll)
        result: JsonObject = publish_task(b["table"], b["branch"])
        return result


@task(name="wap-audit-batch", cache_policy=NO_CACHE)  # type: ignore[untyped-decorator]
def audit_batch_task(batch: str, require_pass: bool = False) -> JsonObject:
    """(Re-)audit every table of the batch; ``require_pass`` raises on a failed table (exit code 1)."""
    return to_jsonable(pipeline.audit_batch(batch, require_pass=require_pass))


@task(name="wap-decision-batch", cache_policy=NO_CACHE)  # type: ignore[untyped-decorator]
def batch_decision_task(batch: str, timeout: float, poll: float) -> str:
    """Wait for the console's decision on the whole batch; raises unless it may be published."""
    d = pipeline.wait_for_batch_decision(batch, timeout, poll)
    get_run_logger().info("decision on batch %s: %s", batch, d)
    return pipeline.require_go(d, "batch", batch).value


@task(name="wap-publish-batch", cache_policy=NO_CACHE)  # type: ignore[untyped-decorator]
def publish_batch_task(batch: str) -> JsonObject:
    """Publish every table of the batch if their audits and review policies allow it: all or none."""
    return to_jsonable(pipeline.publish_batch_if_passed(batch))


@flow(name="wap-batch")  # type: ignore[untyped-decorator]
def wap_batch_flow(
    pairs: list[tuple[str, list[str]]],
    batch: str | None = None,
    create: bool = False,
    wait_timeout: float = 0.0,
    poll: float = pipeline.DEFAULT_POLL,
) -> JsonObject:
    """Several ``(table, sources)`` pairs as one batch: ingest each (in order) → audit the batch → wait
    → publish every table's main or none; a failure after a write discards every branch written."""
    checked = pipeline.check_pairs(pairs)
    name = batch or pipeline.new_batch_name()
    with transaction():
        for table, sources in checked:
            ingest_task(table, sources, create=create, batch=name)
        audit_batch_task(name)
        batch_decision_task(name, wait_timeout, poll)
        result: JsonObject = publish_batch_task(name)
        return result
