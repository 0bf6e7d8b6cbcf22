"""Issue 28 items 1, 2 and 7 in the core and the CLI, on real Spark + Iceberg.

One module-scoped lakehouse (the two-person access file; ``demo.once`` needs no approval): a batch
``b1`` is published, then rolled back. Then, in order:

- a rollback is a move of main: ``last updated`` and the journal's last main move are the rollback's
  time, and main's timeline says when main moved to its head (the snapshot log), not only when it was written;
- a rolled-back batch is reopened once: a second reopen is refused (exit 1, journaled, naming the open
  branch) unless ``--again`` with a ``--reason``; still refused after a fix appended on the branch and
  after a rebase replayed it;
- a rebase audits the new head, as ingest does (``rebase --json`` keeps its keys and adds ``audit``).
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime
from typing import Any

import helpers
import pytest
from helpers import cli_as, guarded_lake, refs, write_csv

from wap_core import Lakehouse, TableId
from wap_core.exceptions import AlreadyReopenedError
from wap_core.lake import catalog as cat
from wap_core.workflow.audit import latest_audit
from wap_core.workflow.rollback import reopen, rolled_back_snapshots
from wap_core.workflow.status import snapshot_timeline, table_infos

T = TableId("demo", "once")
SAM, ANN, ROOT_ = helpers.SAM, helpers.ANN, helpers.ROOT_
SUITE = "demo.once:\n  checks:\n    - not_null: [name]\n"
_names = itertools.count(1)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("reopen_once")
    lh = guarded_lake(home, f"once{next(_names)}", SUITE, helpers.TWO_PERSON_ACCESS, [T])
    assert cli_as(lh, SAM, "ingest", str(T), _src(lh, "b1", [(10, "ivy")]), "--branch", "b1")[0] == 0
    assert cli_as(lh, ANN, "publish", str(T), "b1")[0] == 0
    return lh


def _src(lh: Lakehouse, name: str, rows: list[tuple[object, ...]]) -> str:
    return write_csv(lh.settings.home / "src" / f"{name}.csv", helpers.PEOPLE_HEADER, rows)


def _iso(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text)


def _b1(lh: Lakehouse) -> int:
    tbl = lh.table(T)
    return next(s.snapshot_id for s in tbl.metadata.snapshots if cat.summary_get(s, "wap.branch") == "b1")


def test_a_rollback_is_when_main_last_moved(lake: Lakehouse) -> None:
    lh = lake
    b1 = _b1(lh)
    seed = lh.table(T).metadata.snapshot_by_id(b1).parent_snapshot_id  # type: ignore[union-attr]
    assert seed is not None
    code, _, err = cli_as(lh, ROOT_, "rollback", str(T), "--to", str(seed), "--reason", "bad vendor file")
    assert code == 0, err
    rolled = lh.journal.history(str(T), action="rollback", limit=1)[0]
    assert rolled.outcome == "rolled_back"
    # the journal's last move of main is the rollback; "last updated" is its time, not the snapshot's
    assert lh.journal.last_main_moves()[str(T)] == rolled.at
    info = next(i for i in table_infos(lh) if i.table == str(T))
    written = _iso(snapshot_timeline(lh, T)[0].at)
    assert abs((_iso(info.last_updated) - rolled.at).total_seconds()) < 0.01, (info.last_updated, rolled.at)
    assert _iso(info.last_updated) > written
    # main's timeline: its head was written at the seed, main moved back to it at the rollback
    head = snapshot_timeline(lh, T)[0]
    assert head.snapshot_id == seed
    assert _iso(head.at) < _iso(head.main_at) <= rolled.at, head


def test_a_rolled_back_batch_is_reopened_once_unless_again_with_a_reason(lake: Lakehouse) -> None:
    lh = lake
    b1 = _b1(lh)
    code, out, err = cli_as(lh, SAM, "reopen", str(T), "--snapshot", str(b1))
    assert (code, out.strip()) == (0, "b1_reopened"), err
    [gone] = rolled_back_snapshots(lh, T)
    assert (gone.snapshot_id, gone.reopened_as) == (b1, "b1_reopened")
    before = refs(lh, T)
    # the CLI: refused, exit 1, one line naming the open branch; nothing created
    code, out, err = cli_as(lh, SAM, "reopen", str(T), "--snapshot", str(b1))
    assert code == 1 and out == "", (code, out, err)
    assert err.count("\n") == 1 and "already open again as branch 'b1_reopened'" in err, err
    assert refs(lh, T) == before
    refused = lh.journal.history(str(T), action="reopen", limit=1)[0]
    assert (refused.outcome, refused.user, refused.details["code"]) == ("refused", SAM, "already_open")
    assert "b1_reopened" in (refused.reason or "")
    # the Python API: the same typed refusal
    with pytest.raises(AlreadyReopenedError) as exc:
        reopen(lh, T, b1, user=SAM)
    assert (exc.value.branch, exc.value.snapshot_id, exc.value.exit_code) == ("b1_reopened", b1, 1)
    # --again needs a reason (bad input: exit 2); with one, a second branch, journaled with it
    assert cli_as(lh, SAM, "reopen", str(T), "--snapshot", str(b1), "--again")[0] == 2
    code, out, err = cli_as(
        lh, SAM, "reopen", str(T), "--snapshot", str(b1), "--again", "--reason", "try a second fix"
    )
    assert (code, out.strip()) == (0, "b1_reopened_2"), err
    again = lh.journal.history(str(T), action="reopen", limit=1)[0]
    assert (again.outcome, again.branch, again.reason, again.details["also_open_as"]) == (
        "reopened",
        "b1_reopened_2",
        "try a second fix",
        "b1_reopened",
    )
    assert cli_as(lh, SAM, "discard", str(T), "b1_reopened_2", "--reason", "one is enough")[0] == 0
    # a fix appended on the reopened branch: the batch is still open there
    df = lh.spark.createDataFrame([(11, "fix")], "id bigint, name string")
    df.writeTo(lh.spark_name(T, "b1_reopened")).append()
    with pytest.raises(AlreadyReopenedError):
        reopen(lh, T, b1, user=SAM)


def test_a_rebase_audits_the_new_head_and_the_batch_stays_reopened(lake: Lakehouse) -> None:
    lh = lake
    b1 = _b1(lh)
    assert cli_as(lh, SAM, "ingest", str(T), _src(lh, "b2", [(20, "max")]), "--branch", "b2")[0] == 0
    assert cli_as(lh, ANN, "publish", str(T), "b2")[0] == 0  # main moved: the reopened branch is behind
    code, out, err = cli_as(lh, SAM, "rebase", str(T), "b1_reopened", "--json")
    assert code == 0, err
    res: dict[str, Any] = json.loads(out)
    keys = {"table", "branch", "outcome", "old_head", "new_head", "old_fork", "new_fork", "rows"}
    assert keys < set(res), res  # the keys it had, plus the audit
    assert (res["outcome"], res["rows"], res["audit"]["status"], res["audit"]["snapshot_id"]) == (
        "rebased",
        2,
        "passed",
        res["new_head"],
    )
    stored = latest_audit(lh, T, "b1_reopened")
    assert stored is not None and stored.snapshot_id == res["new_head"] == refs(lh, T)["b1_reopened"]
    # the rebase replayed the batch (new snapshots): the journal still knows it is open there
    with pytest.raises(AlreadyReopenedError):
        reopen(lh, T, b1, user=SAM)
    assert cli_as(lh, ANN, "publish", str(T), "b1_reopened")[0] == 0
    assert rolled_back_snapshots(lh, T)[0].reopened_as is None  # published: no branch holds it any more
