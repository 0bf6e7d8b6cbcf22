"""A DBOS durable workflow for Write-Audit-Publish (``wap-console[dbos]``, PostgreSQL system database).

``wap_workflow`` is ingest → audit → wait for a decision → publish, each a ``@DBOS.step`` whose output DBOS
records. If the process dies (a deploy, a crash, a SIGKILL) while the workflow waits for a person, the
next ``DBOS.launch()`` recovers it and replays the recorded steps without running them again: no second
ingest, no second branch; it goes on waiting where it was and publishes once::

    from dbos import DBOS, SetWorkflowID
    from wap_core.integrations.dbos import wap_workflow

    DBOS(config={"name": "wap-pipelines", "system_database_url": "postgresql://dbos@db/dbos"})
    DBOS.launch()
    with SetWorkflowID("orders-2026-11-24"):  # one id per batch: starting it twice runs it once
        DBOS.start_workflow(wap_workflow, "demo.orders", ["/landing/orders.csv"], timeout=86400, poll=60)

A batch that spans tables: ``wap_batch_workflow([(table, sources), ...], batch=None, ...)``: each pair
ingested into the batch (one step each), then the batch's audit, durable wait and publish (every table's
main, or none). The batch's name is recorded (a step) so a resumed workflow finds the same batch.

The wait is durable too: one recorded look at the journal (``decision_step``) then a durable
``DBOS.sleep(poll)``, at most ``timeout / poll`` times. Steps act as the service identity ``WAP_USER``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dbos import DBOS

from wap_core import pipeline
from wap_core.values import JsonObject, to_jsonable


@DBOS.step()  # type: ignore[untyped-decorator]
def ingest_step(table: str, sources: Sequence[str], create: bool = False) -> JsonObject:
    """Write the batch into a new audit branch (and audit it)."""
    return to_jsonable(pipeline.ingest(table, list(sources), create=create))


@DBOS.step()  # type: ignore[untyped-decorator]
def open_branch_step(table: str, branch: str | None = None, batch: str | None = None) -> JsonObject:
    """Open a branch for the workflow's own Spark step (``identifier`` / ``spark_conf`` say how to write there);
    then :func:`audit_step`, :func:`decision_step` and :func:`publish_step` as after an ingest."""
    return to_jsonable(pipeline.open_branch(table, branch=branch, batch=batch))


@DBOS.step()  # type: ignore[untyped-decorator]
def ingest_into_batch_step(
    table: str, sources: Sequence[str], batch: str, create: bool = False
) -> JsonObject:
    """Write one table of the batch into its branch named like the batch (and audit it)."""
    return to_jsonable(pipeline.ingest(table, list(sources), create=create, batch=batch))


@DBOS.step()  # type: ignore[untyped-decorator]
def batch_name_step(batch: str | None) -> str:
    """The batch's name: given, else a new one (recorded: a resumed workflow gets the same)."""
    return batch or pipeline.new_batch_name()


@DBOS.step()  # type: ignore[untyped-decorator]
def audit_batch_step(batch: str) -> JsonObject:
    """(Re-)audit every table of the batch."""
    return to_jsonable(pipeline.audit_batch(batch))


@DBOS.step()  # type: ignore[untyped-decorator]
def batch_decision_step(batch: str) -> str | None:
    """One look at the journal and the reviews of every table of the batch: the decision so far, or None."""
    d = pipeline.batch_decision_now(batch)
    return None if d is None else d.value


@DBOS.step()  # type: ignore[untyped-decorator]
def publish_batch_step(batch: str) -> JsonObject:
    """Publish every table of the batch if allowed (never forced): all or none."""
    return to_jsonable(pipeline.publish_batch_if_passed(batch))


@DBOS.step()  # type: ignore[untyped-decorator]
def audit_step(table: str, branch: str) -> JsonObject:
    """(Re-)audit the branch."""
    return to_jsonable(pipeline.audit(table, branch))


@DBOS.step()  # type: ignore[untyped-decorator]
def decision_step(table: str, branch: str) -> str | None:
    """One look at the journal and the reviews: the decision so far, or None."""
    d = pipeline.decision_now(table, branch)
    return None if d is None else d.value


@DBOS.step()  # type: ignore[untyped-decorator]
def publish_step(table: str, branch: str) -> JsonObject:
    """Publish if the audit and the review policy allow it (never forced)."""
    return to_jsonable(pipeline.publish_if_passed(table, branch))


@DBOS.workflow()  # type: ignore[untyped-decorator]
def wap_workflow(
    table: str,
    sources: list[str],
    create: bool = False,
    timeout: float = 86400.0,
    poll: float = pipeline.DEFAULT_POLL,
) -> JsonObject:
    """Ingest → audit → wait (durably) for a decision → publish; a rejected batch ends the workflow in error."""
    b = ingest_step(table, sources, create)
    audit_step(b["table"], b["branch"])
    looks = max(1, math.ceil(timeout / poll)) + 1
    decision: str | None = None
    for n in range(looks):
        decision = decision_step(b["table"], b["branch"])
        if decision is not None:
            break
        if n < looks - 1:
            DBOS.sleep(poll)
    d = pipeline.Decision(decision) if decision is not None else pipeline.Decision.TIMED_OUT
    pipeline.require_go(d, b["table"], b["branch"])
    result: JsonObject = publish_step(b["table"], b["branch"])
    return result


@DBOS.workflow()  # type: ignore[untyped-decorator]
def wap_batch_workflow(
    pairs: list[tuple[str, list[str]]],
    batch: str | None = None,
    create: bool = False,
    timeout: float = 86400.0,
    poll: float = pipeline.DEFAULT_POLL,
) -> JsonObject:
    """Several ``(table, sources)`` pairs as one batch: ingest each → audit the batch → wait (durably) →
    publish every table's main or none; a rejected batch ends the workflow in error."""
    checked = pipeline.check_pairs(pairs)
    name: str = batch_name_step(batch)
    for table, sources in checked:
        ingest_into_batch_step(table, sources, name, create)
    audit_batch_step(name)
    looks = max(1, math.ceil(timeout / poll)) + 1
    decision: str | None = None
    for n in range(looks):
        decision = batch_decision_step(name)
        if decision is not None:
            break
        if n < looks - 1:
            DBOS.sleep(poll)
    d = pipeline.Decision(decision) if decision is not None else pipeline.Decision.TIMED_OUT
    pipeline.require_go(d, "batch", name)
    result: JsonObject = publish_batch_step(name)
    return result
