"""The Prefect 3 flow (wap_core.integrations.prefect) on Prefect's local ephemeral API, real Spark + Iceberg.

Success: the batch publishes. Failure after the write: the transaction rolls back and the ingest's
rollback hook discards the branch (a failed audit nobody decided on; a batch a person rejected while the
flow waited). Runs in .venv-prefect (tests/test_pipelines.py).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_BASE = Path(tempfile.mkdtemp(prefix="wap-prefect-"))
atexit.register(shutil.rmtree, _BASE, True)
os.environ.pop("PREFECT_API_URL", None)
os.environ.update(
    {
        "PREFECT_HOME": str(_BASE / "prefect"),
        "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "true",
        "PREFECT_LOGGING_TO_API_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",  # its first start migrates a fresh database
    }
)

import pytest  # noqa: E402
from common import APPROVER, BAD, GOOD, HEADER, SERVICE, Person, as_user, env_of  # noqa: E402
from helpers import write_csv  # noqa: E402
from pyiceberg.table.refs import SnapshotRefType  # noqa: E402

from wap_core import TableId  # noqa: E402
from wap_core.exceptions import BatchRejectedError  # noqa: E402
from wap_core.identifiers import MAIN  # noqa: E402
from wap_core.lake import catalog as cat  # noqa: E402
from wap_core.states import Action  # noqa: E402
from wap_core.workflow.review import request_changes  # noqa: E402

ORDERS = TableId("demo", "orders")
REVIEWED = TableId("demo", "reviewed")


@pytest.fixture(scope="module")
def flow(spark_session: None):  # type: ignore[no-untyped-def]
    env_of(_BASE / "lakehouse", "prefectlh")
    from wap_core.integrations.prefect import wap_flow

    return wap_flow


def _main(table: TableId) -> int | None:
    return cat.ref_snapshot_id(as_user("observer").table(table), MAIN)


def _branches(table: TableId) -> set[str]:
    refs = as_user("observer").table(table).metadata.refs
    return {r for r, ref in refs.items() if r != MAIN and ref.snapshot_ref_type == SnapshotRefType.BRANCH}


def _src(tmp_path: Path, rows) -> str:  # type: ignore[no-untyped-def]
    return write_csv(tmp_path / "batch.csv", HEADER, rows)


def test_a_passing_batch_publishes(flow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = flow(str(ORDERS), [_src(tmp_path, GOOD)], create=True)
    assert r["outcome"] == "published"
    assert _main(ORDERS) == r["main_after"]
    assert _branches(ORDERS) == set()
    pub = as_user("observer").journal.history(str(ORDERS), branch=r["branch"], action=Action.PUBLISH)
    assert [(e.user, e.outcome.value) for e in pub] == [(SERVICE, "published")]


def test_a_failed_audit_rolls_back_by_discarding_the_branch(flow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    main_before = _main(ORDERS)
    with pytest.raises(BatchRejectedError) as e:
        flow(str(ORDERS), [_src(tmp_path, BAD)], wait_timeout=1.0, poll=0.5)
    assert e.value.decision == "timed_out"
    assert _main(ORDERS) == main_before
    assert _branches(ORDERS) == set()  # the write was undone: no branch lingers
    discards = [
        e
        for e in as_user("observer").journal.history(str(ORDERS), action=Action.DISCARD)
        if e.outcome.value == "discarded"
    ]
    assert discards and discards[0].user == SERVICE and "prefect" in (discards[0].reason or "")


def test_a_person_rejects_while_the_flow_waits_and_it_rolls_back(flow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    person = Person(REVIEWED, lambda b: request_changes(as_user(APPROVER), REVIEWED, b, comment="wrong day"))
    person.start()
    with pytest.raises(BatchRejectedError) as e:
        flow(str(REVIEWED), [_src(tmp_path, GOOD)], create=True, wait_timeout=300, poll=0.5)
    person.join(60)
    assert person.error is None, person.error
    assert e.value.decision == "changes_requested"
    tbl = as_user("observer").table(REVIEWED)  # created by this flow: main holds no row
    assert tbl.snapshot_by_id(_main(REVIEWED)).summary["total-records"] == "0"
    assert _branches(REVIEWED) == set()
    assert person.branch is not None
    kinds = [
        (x.action.value, x.outcome.value)
        for x in as_user("observer").journal.history(str(REVIEWED), branch=person.branch)
    ]
    assert ("discard", "discarded") in kinds and ("publish", "published") not in kinds


def test_a_batch_of_two_tables_publishes_together_or_rolls_back(flow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 27 item 1: ``wap_batch_flow`` takes several (table, sources) pairs: one batch, both mains or
    neither; a failure after the writes discards every branch written."""
    from wap_core.integrations.prefect import wap_batch_flow

    items = TableId("demo", "items")
    good = write_csv(tmp_path / "items.csv", HEADER, [(1, "x")])
    r = wap_batch_flow([(str(items), [good]), (str(ORDERS), [_src(tmp_path, GOOD)])], batch="p1", create=True)
    assert (r["outcome"], r["tag"], [t["table"] for t in r["tables"]]) == (
        "published",
        "batch-p1",
        ["demo.items", "demo.orders"],
    )
    for t in r["tables"]:
        assert _main(TableId.parse(t["table"])) == t["main_after"]
    assert _branches(items) == _branches(ORDERS) == set()

    mains = (_main(items), _main(ORDERS))
    with pytest.raises(BatchRejectedError) as e:
        wap_batch_flow(
            [(str(items), [good]), (str(ORDERS), [_src(tmp_path, BAD)])],
            batch="p2",
            wait_timeout=1.0,
            poll=0.5,
        )
    assert e.value.decision == "timed_out"
    assert (_main(items), _main(ORDERS)) == mains  # neither moved
    assert _branches(items) == _branches(ORDERS) == set()  # both writes undone
