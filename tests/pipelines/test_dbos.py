"""The DBOS durable workflow (wap_core.integrations.dbos): killed while it waits for a person, resumed.

Real PostgreSQL (this run's server: the DBOS system database), real Spark + Iceberg. A pipeline process
starts the workflow; once it waits for the approval it is SIGKILLed; a person approves; a new process
launches DBOS, which recovers the workflow at the wait: the recorded ingest and audit are not run again
(one branch, one ingest, one publish). Runs in .venv-dbos (tests/test_pipelines.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from common import APPROVER, GOOD, HEADER, SERVICE, STEWARD, as_user, env_of
from conftest import create_pg_database
from helpers import write_csv

from wap_core import TableId
from wap_core.states import Action
from wap_core.workflow.discard import discard
from wap_core.workflow.review import approve

REVIEWED = TableId("demo", "reviewed")
RUN = Path(__file__).resolve().parent / "dbos_run.py"


@pytest.fixture(scope="module")
def sysdb(postgres: str, tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> str:
    env_of(tmp_path_factory.mktemp("dbos") / "lakehouse", "dboslh")
    return create_pg_database(postgres, f"dbos_{os.getpid()}")


def _start(sysdb: str, wfid: str, src: str, table: str = str(REVIEWED)) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(RUN), sysdb, wfid, table, src, "600", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _steps(sysdb: str, wfid: str) -> list[str]:
    from dbos import DBOSClient
    from sqlalchemy.exc import ProgrammingError

    client = DBOSClient(system_database_url=sysdb)
    try:
        return [s["function_name"].rsplit(".", 1)[-1] for s in client.list_workflow_steps(wfid)]
    except ProgrammingError:  # the pipeline process has not created DBOS's tables yet
        return []
    finally:
        client.destroy()


def _wait_for_steps(sysdb: str, wfid: str, proc: subprocess.Popen[str], looks: int) -> list[str]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        steps = _steps(sysdb, wfid)
        if steps.count("decision_step") >= looks:
            return steps
        time.sleep(0.5)
    raise TimeoutError(f"workflow {wfid} never reached its wait")


def _journal(action: Action) -> list[tuple[str | None, str, str]]:
    return [
        (e.branch, e.user, e.outcome.value)
        for e in as_user("observer").journal.history(str(REVIEWED), action=action)
    ]


def _result(proc: subprocess.Popen[str]) -> dict:  # type: ignore[type-arg]
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    return {k: v for d in lines for k, v in d.items()}


def test_killed_while_waiting_it_resumes_at_the_wait_and_publishes_once(sysdb: str, tmp_path: Path) -> None:
    wfid = "reviewed-batch-1"
    src = write_csv(tmp_path / "batch.csv", HEADER, GOOD)
    first = _start(sysdb, wfid, src)
    try:
        steps = _wait_for_steps(sysdb, wfid, first, looks=2)  # it is waiting for the approval
        assert steps[:2] == ["ingest_step", "audit_step"]
    finally:
        os.kill(first.pid, signal.SIGKILL)  # the pipeline process dies mid-workflow
        first.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)  # and its Spark JVM with it (our own process group)
    ingests, audits = _journal(Action.INGEST), _journal(Action.AUDIT)
    (branch, user, outcome), *more = ingests
    assert (user, outcome, more) == (SERVICE, "written", [])
    assert _journal(Action.PUBLISH) == []

    approve(as_user(APPROVER), REVIEWED, branch, comment="ok")  # the person decides while nothing runs

    second = _start(sysdb, wfid, src)  # a new process: DBOS.launch() recovers the workflow
    res = _result(second)
    assert res.get("resumed") == wfid
    assert res["result"]["outcome"] == "published" and res["result"]["branch"] == branch
    # resumed at the wait: no second ingest (one branch), no second audit, one publish
    assert _journal(Action.INGEST) == ingests
    assert _journal(Action.AUDIT) == audits
    assert _journal(Action.PUBLISH) == [(branch, SERVICE, "published")]
    steps = _steps(sysdb, wfid)
    assert steps.count("ingest_step") == 1 and steps.count("audit_step") == 1
    assert steps.count("publish_step") == 1 and steps[-1] == "publish_step"


def test_a_discard_while_waiting_ends_the_workflow_rejected(sysdb: str, tmp_path: Path) -> None:
    wfid = "reviewed-batch-2"
    src = write_csv(tmp_path / "batch.csv", HEADER, GOOD)
    proc = _start(sysdb, wfid, src)
    try:
        _wait_for_steps(sysdb, wfid, proc, looks=1)
        branch = next(
            b for b, _, o in _journal(Action.INGEST) if o == "written"
        )  # newest first: this batch's
        assert branch is not None
        discard(as_user(STEWARD), REVIEWED, branch, reason="no")
        res = _result(proc)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert res == {"started": wfid, "error": "BatchRejectedError", "decision": "discarded"}


def test_a_batch_of_two_tables_publishes_both_mains_at_once(sysdb: str, tmp_path: Path) -> None:
    """Issue 27 item 1: ``wap_batch_workflow`` takes several (table, sources) pairs: one batch, one publish."""
    items = write_csv(tmp_path / "items.csv", HEADER, [(1, "x")])
    orders = write_csv(tmp_path / "orders.csv", HEADER, GOOD)
    wfid = "two-tables-1"
    res = _result(_start(sysdb, wfid, f"{items}+{orders}", table="demo.items+demo.orders"))
    r = res["result"]
    assert (r["outcome"], [t["table"] for t in r["tables"]]) == ("published", ["demo.items", "demo.orders"])
    batch = r["batch"]
    assert r["tag"] == f"batch-{batch}" and batch.startswith("batch_")
    for t in r["tables"]:
        tbl = as_user("observer").table(TableId.parse(t["table"]))
        assert tbl.metadata.refs["main"].snapshot_id == t["main_after"] and batch not in tbl.metadata.refs
    steps = _steps(sysdb, wfid)
    assert steps.count("batch_name_step") == 1 and steps.count("ingest_into_batch_step") == 2
    assert steps.count("publish_batch_step") == 1 and steps[-1] == "publish_batch_step"
