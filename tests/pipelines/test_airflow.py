"""The example Airflow DAG (examples/airflow/wap_pipeline.py) end to end with ``dag.test()``.

Real Airflow 3 (SQLite metadata DB in a temp AIRFLOW_HOME), real Spark + Iceberg in temp dirs. A passing
batch publishes; a failing one waits in the sensor (reschedule mode, and deferred) until a second user
decides through wap_core from a thread: discard → the run fails, an admin's publish → the run succeeds,
an approval (policy: 1 approval) → the pipeline publishes. Runs in .venv-airflow (tests/test_pipelines.py).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_BASE = Path(tempfile.mkdtemp(prefix="wap-airflow-"))
atexit.register(shutil.rmtree, _BASE, True)
_ROOT = Path(__file__).resolve().parents[2]
os.environ.update(
    {
        "AIRFLOW_HOME": str(_BASE / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(_BASE / "dags"),  # the example DAG and the tests' own (below)
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_BASE / 'airflow.db'}",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "WAP_DECISION_POLL": "1",
        "WAP_DECISION_TIMEOUT": "300",
    }
)

(_BASE / "dags").mkdir()  # dag.test() syncs the DAGs folder to the metadata DB: every DAG run here is in it
(_BASE / "dags" / "wap_pipeline.py").symlink_to(_ROOT / "examples" / "airflow" / "wap_pipeline.py")
(_BASE / "dags" / "airflow_dags.py").symlink_to(Path(__file__).resolve().parent / "airflow_dags.py")

import pytest  # noqa: E402
from common import (  # noqa: E402
    ADMIN,
    APPROVER,
    BAD,
    GOOD,
    HEADER,
    SERVICE,
    STEWARD,
    Person,
    as_user,
    env_of,
)
from helpers import write_csv  # noqa: E402

from wap_core import TableId  # noqa: E402
from wap_core.identifiers import MAIN  # noqa: E402
from wap_core.lake import catalog as cat  # noqa: E402
from wap_core.states import Action  # noqa: E402
from wap_core.workflow.discard import discard  # noqa: E402
from wap_core.workflow.publish import publish  # noqa: E402
from wap_core.workflow.review import approve  # noqa: E402

ORDERS = TableId("demo", "orders")
REVIEWED = TableId("demo", "reviewed")


@pytest.fixture(scope="module")
def dag(spark_session: None):  # type: ignore[no-untyped-def]
    env_of(_BASE / "lakehouse", "airflowlh")
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True
    )
    sys.path.insert(0, str(_BASE / "dags"))
    import wap_pipeline

    return wap_pipeline.dag


@pytest.fixture(scope="module")
def renamed(dag):  # type: ignore[no-untyped-def]
    """A DAG of our own whose ingest task is not called ``ingest``: ``write >> check >> gate >> ship``."""
    import airflow_dags

    return airflow_dags.renamed


@pytest.fixture(scope="module")
def batch_dag(dag):  # type: ignore[no-untyped-def]
    """Two ingest tasks into one batch, then one audit, sensor and publish of the whole batch."""
    import airflow_dags

    return airflow_dags.batch


@pytest.fixture(scope="module")
def job_dag(dag):  # type: ignore[no-untyped-def]
    """open a branch -> the user's own Spark task (MERGE) -> audit -> decision -> publish."""
    import airflow_dags

    return airflow_dags.job


def _run(dag, table: TableId, rows, tmp_path: Path, person: Person | None = None):  # type: ignore[no-untyped-def]
    src = write_csv(tmp_path / f"{table.name}.csv", HEADER, rows)
    if person is not None:
        person.start()
    dr = dag.test(run_conf={"table": str(table), "sources": [src]})
    if person is not None:
        person.join(60)
        assert person.error is None, person.error
    states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
    return dr, states


def _main_rows(table: TableId) -> int:
    lh = as_user("observer")
    if table not in lh.tables():  # not created yet (a test run on its own)
        return 0
    snap = cat.ref_snapshot_id(lh.table(table), MAIN)
    return 0 if snap is None else lh.read_main(table).count()


def _xcom(dr, task_id: str, key: str):  # type: ignore[no-untyped-def]
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as s:
        row = (
            s.query(XComModel)
            .filter_by(dag_id=dr.dag_id, run_id=dr.run_id, task_id=task_id, key=key)
            .one_or_none()
        )
        return None if row is None else XComModel.deserialize_value(row)


def _reschedules(dr) -> int:  # type: ignore[no-untyped-def]
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session

    ti = dr.get_task_instance("decision")
    with create_session() as s:
        return int(s.query(TaskReschedule).filter(TaskReschedule.ti_id == ti.id).count())


def test_a_passing_batch_publishes(dag, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dr, states = _run(dag, ORDERS, GOOD, tmp_path)
    assert str(dr.state) == "success", states
    assert states == dict.fromkeys(("ingest", "audit", "decision", "publish"), "success")
    assert _main_rows(ORDERS) == 2
    branch = _xcom(dr, "ingest", "branch")
    assert _xcom(dr, "ingest", "table") == "demo.orders"
    assert isinstance(_xcom(dr, "ingest", "snapshot_id"), int)
    assert _xcom(dr, "publish", "snapshot_id") == _xcom(dr, "ingest", "snapshot_id")
    # the task link "Open review" is the console's deep link of the batch
    link = _xcom(dr, "decision", "_link_OpenReviewLink")
    assert link == f"http://console.test:8501/review?table=demo.orders&branch={branch}"
    pub = as_user("observer").journal.history("demo.orders", branch=branch, action=Action.PUBLISH)
    assert [(e.user, e.outcome.value) for e in pub] == [(SERVICE, "published")]


def test_a_failing_batch_waits_and_a_steward_discards_it(dag, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    before = _main_rows(ORDERS)
    person = Person(ORDERS, lambda b: discard(as_user(STEWARD), ORDERS, b, reason="bad names"))
    dr, states = _run(dag, ORDERS, BAD, tmp_path, person)
    assert str(dr.state) == "failed", states
    assert states["ingest"] == states["audit"] == "success"
    assert states["decision"] == "failed"
    assert states["publish"] == "upstream_failed"
    assert _main_rows(ORDERS) == before
    assert person.branch not in as_user("observer").table(ORDERS).metadata.refs
    assert _reschedules(dr) >= 1  # the sensor rescheduled while it waited (it did not hold a worker slot)


def test_a_failing_batch_waits_and_an_admin_publishes_it(dag, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    before = _main_rows(ORDERS)

    def force(branch: str) -> None:
        publish(as_user(ADMIN), ORDERS, branch, force=True, reason="names fixed upstream later")

    person = Person(ORDERS, force)
    dr, states = _run(dag, ORDERS, BAD, tmp_path, person)
    assert str(dr.state) == "success", states
    assert states["decision"] == "success" and states["publish"] == "success"
    assert _xcom(dr, "publish", "return_value")["outcome"] == "already_published"
    assert _main_rows(ORDERS) == before + 2
    pub = as_user("observer").journal.history("demo.orders", branch=person.branch, action=Action.PUBLISH)
    assert [(e.user, e.outcome.value) for e in pub] == [(ADMIN, "forced")]


def test_deferred_wait_for_an_approval_then_the_pipeline_publishes(dag, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sensor = dag.get_task("decision")
    sensor.deferrable = True
    try:
        person = Person(REVIEWED, lambda b: approve(as_user(APPROVER), REVIEWED, b, comment="ok"))
        dr, states = _run(dag, REVIEWED, GOOD, tmp_path, person)
    finally:
        sensor.deferrable = False
    assert str(dr.state) == "success", states
    assert _xcom(dr, "decision", "return_value")["decision"] == "approved"
    assert _reschedules(dr) == 0  # it waited deferred (in the trigger), not rescheduled
    assert _main_rows(REVIEWED) == 2
    pub = as_user("observer").journal.history("demo.reviewed", branch=person.branch, action=Action.PUBLISH)
    assert [(e.user, e.outcome.value) for e in pub] == [(SERVICE, "published")]


def test_a_dag_whose_ingest_task_has_another_name_publishes(renamed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 27 item 1: the audit, decision and publish find their batch from the upstream ingest task,
    whatever it is called (today: "no table/branch given and none in the XCom of task 'ingest'")."""
    before = _main_rows(ORDERS)
    dr, states = _run(renamed, ORDERS, GOOD, tmp_path)
    assert str(dr.state) == "success", states
    assert states == dict.fromkeys(("write", "check", "gate", "ship"), "success")
    branch = _xcom(dr, "write", "branch")
    assert _xcom(dr, "check", "branch") == _xcom(dr, "gate", "branch") == branch
    assert _xcom(dr, "ship", "return_value")["outcome"] == "published"
    assert _main_rows(ORDERS) == before + 2
    pub = as_user("observer").journal.history("demo.orders", branch=branch, action=Action.PUBLISH)
    assert [(e.user, e.outcome.value) for e in pub] == [(SERVICE, "published")]


def test_two_ingest_tasks_write_one_batch_published_all_together(batch_dag, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 27 item 1: several (table, sources) pairs are one batch; the publish moves every main at once."""
    items = TableId("demo", "items")
    srcs = {
        "item_sources": [write_csv(tmp_path / "items.csv", HEADER, [(1, "x"), (2, "y"), (3, "z")])],
        "order_sources": [write_csv(tmp_path / "orders.csv", HEADER, GOOD)],
    }
    before = _main_rows(ORDERS)
    dr = batch_dag.test(run_conf={"batch": "day_1", **srcs})
    states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
    assert str(dr.state) == "success", states
    assert _xcom(dr, "write_items", "batch") == _xcom(dr, "write_orders", "batch") == "day_1"
    assert _xcom(dr, "check", "return_value")["batch"] == "day_1"
    assert [a["table"] for a in _xcom(dr, "check", "return_value")["tables"]] == ["demo.items", "demo.orders"]
    assert _xcom(dr, "gate", "return_value") == {"batch": "day_1", "branch": "day_1", "decision": "approved"}
    assert _xcom(dr, "gate", "_link_OpenReviewLink") == "http://console.test:8501/review?batch=day_1"
    shipped = _xcom(dr, "ship", "return_value")
    assert (shipped["outcome"], shipped["tag"]) == ("published", "batch-day_1")
    assert _main_rows(ORDERS) == before + 2 and _main_rows(items) == 3
    for task, table in (("write_items", items), ("write_orders", ORDERS)):
        refs = as_user("observer").table(table).metadata.refs
        assert refs["main"].snapshot_id == refs["batch-day_1"].snapshot_id == _xcom(dr, task, "snapshot_id")
        pub = as_user("observer").journal.history(str(table), branch="day_1", action=Action.PUBLISH)
        assert [(e.user, e.outcome.value) for e in pub] == [(SERVICE, "published")]


def test_a_dag_opens_a_branch_its_own_spark_task_merges_into_and_publishes(job_dag) -> None:  # type: ignore[no-untyped-def]
    jobs = TableId("demo", "jobs")
    lh = as_user(SERVICE)
    lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{lh.settings.catalog_name}`.`demo`")
    lh.spark.sql(f"CREATE TABLE {lh.sql_name(jobs)} (id bigint, name string) USING iceberg")
    lh.spark.sql(f"INSERT INTO {lh.sql_name(jobs)} VALUES (1, 'ann'), (2, 'bob')")
    main0 = cat.ref_snapshot_id(lh.table(jobs), MAIN)
    dr = job_dag.test(run_conf={"table": str(jobs)})
    states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
    assert str(dr.state) == "success", states
    assert states == dict.fromkeys(("open", "merge", "audit", "decision", "publish"), "success")
    branch = _xcom(dr, "open", "branch")
    assert _xcom(dr, "open", "snapshot_id") == main0
    assert _xcom(dr, "open", "spark_conf") == {"spark.wap.branch": branch}
    rows = {r["id"]: r["name"] for r in as_user("observer").read_main(jobs).collect()}
    assert rows == {1: "ann-renamed", 2: "bob", 9: "ivy"}  # the upsert published: one updated, one inserted
    journal = as_user("observer").journal
    opened = journal.history(str(jobs), branch=branch, action=Action.OPEN)
    assert [(e.user, e.outcome.value) for e in opened] == [(SERVICE, "opened")]  # the pipeline is the author
    audit = journal.history(str(jobs), branch=branch, action=Action.AUDIT)[0]
    assert audit.outcome.value == "passed"
