"""Airflow 3 operators for Write-Audit-Publish, with the console as the human gate (``wap-console[airflow]``).

::

    ingest = WapIngestOperator(task_id="ingest", table="demo.orders", sources=["/landing/orders.csv"])
    audit = WapAuditOperator(task_id="audit")  # table and branch from the upstream ingest task's XCom
    decision = WapDecisionSensor(task_id="decision", mode="reschedule", poke_interval=60, timeout=86400)
    publish = WapPublishOperator(task_id="publish")
    ingest >> audit >> decision >> publish

Each task acts as the pipeline's service identity (``WAP_USER``; the lakehouse of ``WAP_HOME`` /
``WAP_CONFIG``, :meth:`wap_core.Lakehouse.from_env`). XComs: ``table``, ``branch``, ``snapshot_id``
(and the return value, a dict). Every operator has the extra link "Open review": the console's Review
page of the batch (``console_url`` of the notifications file).

A DAG whose own Spark task writes the branch (``MERGE INTO``, ``UPDATE``, ``DELETE``, ``INSERT OVERWRITE``)
opens it first; the audit, sensor and publish find the open task as they find an ingest task::

    opened = WapOpenBranchOperator(task_id="open", table="demo.orders")
    merge = my_spark_task(opened.output)  # writes to opened["identifier"] (or with opened["spark_conf"])
    opened >> merge >> audit >> decision >> publish

A batch that spans tables: several ingest tasks with the same ``batch=NAME`` (one ``(table, sources)`` pair
each), upstream of one audit, sensor and publish, which then act on the whole batch (every table's audit,
one decision, every table's main moved or none)::

    flights = WapIngestOperator(task_id="flights", table="demo.flights", sources=[...], batch="day_{{ ds_nodash }}")
    airports = WapIngestOperator(task_id="airports", table="demo.airports", sources=[...], batch="day_{{ ds_nodash }}")
    airports >> flights >> audit >> decision >> publish  # the referenced table first

The sensor waits for a person in the console: it succeeds when the branch is publishable (audit passed,
review policy satisfied) or was published by a person, and fails (no retry) when the batch was discarded
or changes were requested. ``mode="reschedule"`` frees the worker slot between looks; ``deferrable=True``
hands the wait to the triggerer (:class:`WapDecisionTrigger`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator, BaseOperatorLink, BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from wap_core import pipeline
from wap_core.exceptions import WapError
from wap_core.values import JsonObject, to_jsonable

INGEST_TASK = "ingest"  # the upstream task whose XCom names the batch when no WapIngestOperator is upstream
REVIEW_URL_KEY = "review_url"
BATCH_KEY = "batch"  # the XCom of an ingest into a batch that spans tables: the batch's name


@dataclass(frozen=True)
class Target:
    """What a task works on: one table's branch, or (``batch`` set) every table of a batch."""

    table: str | None  # None for a batch that spans tables
    branch: str  # a batch's branches are named like it
    batch: str | None = None

    def __str__(self) -> str:
        return f"batch {self.batch}" if self.batch else f"{self.table} {self.branch}"

    def review_url(self) -> str:
        """The console's Review page of the branch or of the batch."""
        if self.batch or self.table is None:
            return pipeline.batch_review_url(self.batch or self.branch)
        return pipeline.review_url(self.table, self.branch)

    def decision_now(self) -> pipeline.Decision | None:
        """One look at the journal: the decision on the branch (or batch) if there is one yet."""
        if self.batch or self.table is None:
            return pipeline.batch_decision_now(self.batch or self.branch)
        return pipeline.decision_now(self.table, self.branch)

    def require_go(self, decision: pipeline.Decision) -> pipeline.Decision:
        """``decision`` when the pipeline may publish, else :class:`BatchRejectedError`."""
        return pipeline.require_go(decision, self.table or "batch", self.branch)


class OpenReviewLink(BaseOperatorLink):  # type: ignore[misc]
    """The extra link "Open review": the console's Review page of the task's batch."""

    name = "Open review"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """The Review page of the batch the task worked on (set while it ran, else from its XCom)."""
        url = getattr(operator, "_wap_review_url", None)
        if url:
            return str(url)
        from airflow.sdk.bases.xcom import BaseXCom

        return str(BaseXCom.get_value(ti_key=ti_key, key=REVIEW_URL_KEY) or "")


def _push(context: Any, operator: Any, target: Target, snapshot_id: int | None) -> None:
    """XComs ``table``, ``branch``, ``snapshot_id`` (one table) or ``batch`` and ``branch`` (a batch)."""
    ti = context["ti"]
    url = target.review_url()
    operator._wap_review_url = url
    if target.batch:
        ti.xcom_push(key=BATCH_KEY, value=target.batch)
    else:
        ti.xcom_push(key="table", value=target.table)
    ti.xcom_push(key="branch", value=target.branch)
    ti.xcom_push(key="snapshot_id", value=snapshot_id)
    ti.xcom_push(key=REVIEW_URL_KEY, value=url)


def _fail(exc: WapError) -> AirflowFailException:
    """A refusal (exit code 1) is final: no retry repeats a failed audit or a person's decision."""
    return AirflowFailException(f"{type(exc).__name__} (exit {exc.exit_code}): {exc}")


@contextmanager
def _refusal_fails_the_task() -> Iterator[None]:
    """A refusal (exit code 1) in the block fails the task for good (:func:`_fail`); other errors stay retryable."""
    try:
        yield
    except WapError as exc:
        if exc.exit_code == 1:
            raise _fail(exc) from exc
        raise


class _BatchTask:
    """Table and branch (or a batch): given, or from the XCom of the upstream ingest task(s).

    ``source_task_id`` names that task; by default (None) it is the nearest upstream
    :class:`WapIngestOperator`, whatever its task id (the DAG's edges, walked level by level up from this
    task); several there are one batch that spans tables when they wrote into the same ``batch``. No ingest
    operator upstream: the task ``ingest`` (:data:`INGEST_TASK`), as before.
    """

    def __init__(
        self,
        *,
        table: str | None = None,
        branch: str | None = None,
        batch: str | None = None,
        source_task_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)  # the operator's (BaseOperator's) own arguments
        self.table = table
        self.branch = branch
        self.batch = batch
        self.source_task_id = source_task_id

    def ingest_task_ids(self) -> list[str]:
        """The task(s) whose XCom names the batch: ``source_task_id``, else the nearest upstream ingest(s)."""
        if self.source_task_id:
            return [self.source_task_id]
        found = _nearest_ingests(self)
        return found or [INGEST_TASK]

    def target(self, context: Any) -> Target:
        """What the task works on: its own table/branch or batch, else the upstream ingest task(s)' XCom."""
        if self.batch:
            return Target(None, str(self.batch), str(self.batch))
        ti = context["ti"]
        sources = self.ingest_task_ids()
        if not (self.table and self.branch):
            batches = {ti.xcom_pull(task_ids=t, key=BATCH_KEY) for t in sources}
            if batches != {None}:
                if len(batches) > 1:
                    raise AirflowFailException(
                        f"the ingest tasks upstream ({', '.join(sources)}) wrote different batches: "
                        "give batch or source_task_id"
                    )
                (name,) = batches
                return Target(None, str(name), str(name))
        source, *more = sources
        if more and not (self.table and self.branch):
            raise AirflowFailException(
                f"several ingest tasks upstream ({', '.join(sources)}) and no batch: give source_task_id"
            )
        table = self.table or ti.xcom_pull(task_ids=source, key="table")
        branch = self.branch or ti.xcom_pull(task_ids=source, key="branch")
        if not table or not branch:
            raise AirflowFailException(f"no table/branch given and none in the XCom of task {source!r}")
        return Target(str(table), str(branch))


def _nearest_ingests(task: Any) -> list[str]:
    """The ids of the ingest operators nearest upstream of ``task`` (the first level that has any), sorted."""
    if task.get_dag() is None:
        return []
    seen: set[str] = set()
    level = set(task.upstream_task_ids)
    while level:
        tasks = [task.dag.get_task(t) for t in sorted(level - seen)]
        found = sorted(t.task_id for t in tasks if isinstance(t, (WapIngestOperator, WapOpenBranchOperator)))
        if found:
            return found
        seen |= level
        level = {u for t in tasks for u in t.upstream_task_ids} - seen
    return []


class WapIngestOperator(BaseOperator):  # type: ignore[misc]
    """Write ``sources`` into a new audit branch of ``table`` (and audit it); XCom: table, branch, snapshot_id.

    ``batch``: the table joins the open batch of that name (its branch named like it; XCom ``batch``):
    several ingest tasks with the same ``batch`` make one batch that spans tables.
    """

    template_fields: Sequence[str] = ("table", "sources", "branch", "batch")
    operator_extra_links = (OpenReviewLink(),)

    def __init__(
        self,
        *,
        table: str,
        sources: Sequence[str] | str,
        branch: str | None = None,
        fmt: str | None = None,
        create: bool = False,
        batch: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.sources = sources if isinstance(sources, str) else list(sources)  # a str: one file or a template
        self.branch = branch
        self.fmt = fmt
        self.create = create
        self.batch = batch

    def execute(self, context: Any) -> JsonObject:
        """Ingest; XCom: table, branch, snapshot_id; returns the Branch as a dict."""
        srcs = [self.sources] if isinstance(self.sources, str) else list(self.sources)
        with _refusal_fails_the_task():
            b = pipeline.ingest(
                self.table,
                srcs,
                branch=self.branch or None,
                fmt=self.fmt,
                create=self.create,
                batch=self.batch or None,
            )
        _push(context, self, Target(b.table, b.branch), b.snapshot_id)
        if b.batch:
            context["ti"].xcom_push(key=BATCH_KEY, value=b.batch)
        self.log.info("ingested %s rows into %s %s: audit %s", b.rows_written, b.table, b.branch, b.status)
        return to_jsonable(b)


class WapOpenBranchOperator(BaseOperator):  # type: ignore[misc]
    """Open a branch of ``table`` for the DAG's own Spark task (MERGE, UPDATE, DELETE, INSERT OVERWRITE, appends),
    the pipeline's identity its author; XCom: table, branch, snapshot_id (main's head), ``spark_conf`` and
    ``identifier`` (how the Spark task writes there); returns the :class:`~wap_core.api.OpenedBranch` as a dict.

    The audit, the sensor and the publish downstream find it as they find an ingest task (nearest upstream).
    ``batch``: the table joins the open batch of that name (XCom ``batch``).
    """

    template_fields: Sequence[str] = ("table", "branch", "batch")
    operator_extra_links = (OpenReviewLink(),)

    def __init__(
        self, *, table: str, branch: str | None = None, batch: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.table, self.branch, self.batch = table, branch, batch

    def execute(self, context: Any) -> JsonObject:
        """Open the branch; XComs as above."""
        with _refusal_fails_the_task():
            opened = pipeline.open_branch(self.table, branch=self.branch or None, batch=self.batch or None)
        _push(context, self, Target(opened.table, opened.branch), opened.head)
        ti = context["ti"]
        if opened.batch:
            ti.xcom_push(key=BATCH_KEY, value=opened.batch)
        ti.xcom_push(key="spark_conf", value=dict(opened.spark_conf))
        ti.xcom_push(key="identifier", value=opened.identifier)
        self.log.info("%s %s %s for %s", opened.outcome, opened.table, opened.branch, opened.user)
        return to_jsonable(opened)


class WapAuditOperator(_BatchTask, BaseOperator):  # type: ignore[misc]
    """(Re-)audit the batch; ``require_pass=True`` fails the task on a failed audit (else the sensor waits)."""

    template_fields: Sequence[str] = ("table", "branch", "batch")
    operator_extra_links = (OpenReviewLink(),)

    def __init__(self, *, require_pass: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.require_pass = require_pass

    def execute(self, context: Any) -> JsonObject:
        """Audit; returns the Audit (a batch's: the BatchAudit) as a dict."""
        t = self.target(context)
        try:
            with _refusal_fails_the_task():
                if t.batch:
                    ba = pipeline.audit_batch(t.batch, require_pass=self.require_pass)
                    _push(context, self, t, None)
                    return to_jsonable(ba)
                a = pipeline.audit(str(t.table), t.branch, require_pass=self.require_pass)
        finally:
            self._wap_review_url = t.review_url()
        _push(context, self, t, a.snapshot_id)
        return to_jsonable(a)


class WapDecisionTrigger(BaseTrigger):  # type: ignore[misc]
    """Looks at the journal every ``poll`` seconds (in a thread: the core is synchronous) until a decision."""

    def __init__(self, table: str | None, branch: str, poll: float, batch: str | None = None) -> None:
        super().__init__()
        self.table = table
        self.branch = branch
        self.poll = poll
        self.batch = batch

    def serialize(self) -> tuple[str, JsonObject]:
        """The trigger's class path and arguments (how the triggerer rebuilds it)."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"table": self.table, "branch": self.branch, "poll": self.poll, "batch": self.batch},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """One event with the decision, once there is one."""
        while True:
            d = await asyncio.to_thread(Target(self.table, self.branch, self.batch).decision_now)
            if d is not None:
                yield TriggerEvent({"decision": d.value})
                return
            await asyncio.sleep(self.poll)


class WapDecisionSensor(_BatchTask, BaseSensorOperator):  # type: ignore[misc]
    """Wait for the console: success when publishable or published, failure when discarded or changes requested.

    Reads the journal and the reviews (never Spark). ``timeout`` (seconds) ends the wait as a failure
    (the decision ``timed_out``); ``deferrable=True`` waits in the triggerer instead of a worker.
    """

    template_fields: Sequence[str] = ("table", "branch", "batch")
    operator_extra_links = (OpenReviewLink(),)

    def __init__(self, *, deferrable: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.deferrable = deferrable

    def _outcome(self, context: Any, t: Target, decision: pipeline.Decision) -> JsonObject:
        self.log.info("decision on %s: %s", t, decision)
        try:
            t.require_go(decision)
        except WapError as exc:
            raise _fail(exc) from exc
        _push(context, self, t, None)
        where: JsonObject = {"batch": t.batch} if t.batch else {"table": t.table}
        return {**where, "branch": t.branch, "decision": decision.value}

    def execute(self, context: Any) -> Any:
        """Wait: by pokes (reschedule or poke mode) or deferred to the triggerer."""
        t = self.target(context)
        self._wap_review_url = t.review_url()
        if not self.deferrable:
            return super().execute(context)
        d = t.decision_now()
        if d is not None:
            return self._outcome(context, t, d)
        self.defer(
            trigger=WapDecisionTrigger(t.table, t.branch, float(self.poke_interval), t.batch),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)) if self.timeout else None,
        )
        return None  # pragma: no cover - defer raises

    def execute_complete(self, context: Any, event: JsonObject | None = None) -> JsonObject:
        """Back from the trigger: succeed on a go, fail on a rejection."""
        t = self.target(context)
        if not event or "decision" not in event:
            raise AirflowFailException(f"{t}: the wait ended without a decision ({event!r})")
        return self._outcome(context, t, pipeline.Decision(event["decision"]))

    def poke(self, context: Any) -> bool | PokeReturnValue:
        """One look at the journal: done when there is a decision (failing the task on a rejection)."""
        t = self.target(context)
        d = t.decision_now()
        if d is None:
            self.log.info("waiting for a decision on %s in the console", t)
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._outcome(context, t, d))


class WapPublishOperator(_BatchTask, BaseOperator):  # type: ignore[misc]
    """Publish the batch if its audit and review policy allow it (never forced); a person's publish is a no-op."""

    template_fields: Sequence[str] = ("table", "branch", "batch")
    operator_extra_links = (OpenReviewLink(),)

    def __init__(self, **kwargs: Any) -> None:
        # its own __init__: Airflow's metaclass wraps (apply_defaults) only an __init__ other than the
        # first base's (_BatchTask's), and BaseOperator's wrapper needs the outermost one wrapped
        super().__init__(**kwargs)

    def execute(self, context: Any) -> JsonObject:
        """Publish; XCom snapshot_id is main's new head; returns the PublishResult (a batch's: the
        BatchPublishResult, every table's main moved or none) as a dict."""
        t = self.target(context)
        self._wap_review_url = t.review_url()
        if t.batch:
            with _refusal_fails_the_task():
                br = pipeline.publish_batch_if_passed(t.batch)
            _push(context, self, t, None)
            self.log.info("%s: %s (%s)", t, br.outcome, ", ".join(x.table for x in br.tables))
            return to_jsonable(br)
        with _refusal_fails_the_task():
            r = pipeline.publish_if_passed(str(t.table), t.branch)
        _push(context, self, t, r.main_after)
        self.log.info("%s: %s (main %s -> %s)", t, r.outcome, r.main_before, r.main_after)
        return to_jsonable(r)
