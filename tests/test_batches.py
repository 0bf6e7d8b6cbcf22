"""Batches that span tables (issue 27): membership on real Spark + Iceberg.

One module-scoped lakehouse with two published tables, ``shop.orders`` and ``shop.items``. What is proved
here: ``--batch`` puts each table on a branch of the batch's name and records it as a member; a plain
``--branch`` is a one-table batch (no member row, whatever its name); a batch's first use adopts the tables
that already have an open branch of its name; the CLI's ``--batch`` and its JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ANN, ROOT_, SAM, TWO_PERSON_ACCESS, cli_as, guarded_lake, refs, write_csv

from wap_core import Lakehouse, TableId
from wap_core.exceptions import RefusedError, ValidationError
from wap_core.lake.multitable import Atomicity
from wap_core.states import Action, Outcome
from wap_core.store import batches as store
from wap_core.workflow.batch import batch_of, load_batch, open_batches
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.readiness import batch_readiness, publish_readiness

ORD, ITM = TableId("shop", "orders"), TableId("shop", "items")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("batches")
    return guarded_lake(home, "batches", "{}\n", TWO_PERSON_ACCESS, [ORD, ITM])


def src(lh: Lakehouse, name: str, rows: list[tuple[object, ...]]) -> str:
    return write_csv(Path(lh.settings.home) / "src" / f"{name}.csv", ("id", "name"), rows)


def test_batch_members_are_the_tables_on_its_branches(lake: Lakehouse) -> None:
    r1 = ingest(lake, ORD, [src(lake, "o1", [(3, "cid")])], batch="b1", user=SAM)
    r2 = ingest(lake, ITM, [src(lake, "i1", [(4, "dee")])], batch="b1", user=SAM)
    assert (r1.branch, r1.batch, r2.branch, r2.batch) == ("b1", "b1", "b1", "b1")
    b = load_batch(lake, "b1")
    assert b.table_ids == (ITM, ORD)  # sorted
    assert b.heads == {str(ORD): refs(lake, ORD)["b1"], str(ITM): refs(lake, ITM)["b1"]}
    assert all(t.fork == refs(lake, t.table)["main"] and not t.main_moved for t in b.tables)
    assert batch_of(lake, ORD, "b1") == b and "b1" in [x.name for x in open_batches(lake)]
    snap = lake.table(ORD).snapshot_by_id(refs(lake, ORD)["b1"])
    assert snap is not None and snap.summary is not None and snap.summary.get("wap.batch") == "b1"
    # a table joins once: its branch exists, a second ingest into it is refused as for any branch
    with pytest.raises(ValidationError, match="already exists"):
        ingest(lake, ORD, [src(lake, "o1b", [(5, "eve")])], batch="b1", user=SAM)


def test_a_plain_branch_is_a_one_table_batch(lake: Lakehouse) -> None:
    ingest(lake, ORD, [src(lake, "o2", [(6, "fay")])], branch="solo", user=SAM)
    ingest(
        lake, ITM, [src(lake, "i2", [(7, "gus")])], branch="solo", user=SAM
    )  # same name, still two branches
    assert batch_of(lake, ORD, "solo") is None and batch_of(lake, ITM, "solo") is None
    assert not store.open_members(lake.journal.engine, "solo")
    with pytest.raises(ValidationError, match="not both"):
        ingest(lake, ORD, [src(lake, "o3", [(8, "hal")])], branch="x1", batch="y1", user=SAM)


def test_first_use_adopts_open_branches_of_its_name(lake: Lakehouse) -> None:
    ingest(lake, ORD, [src(lake, "o4", [(9, "ida")])], branch="w2", user=SAM)  # the failing week, alone
    assert batch_of(lake, ORD, "w2") is None
    ingest(
        lake, ITM, [src(lake, "i4", [(10, "jo")])], batch="w2", user=SAM
    )  # its airports join: the batch is born
    b = load_batch(lake, "w2")
    assert b.table_ids == (ITM, ORD)
    who = {m.table: m.added_by for m in store.members(lake.journal.engine, "w2")}
    assert who == {str(ORD): SAM, str(ITM): SAM}


def test_cli_ingest_batch(lake: Lakehouse) -> None:
    code, out, err = cli_as(
        lake, SAM, "ingest", str(ORD), src(lake, "o5", [(11, "kim")]), "--batch", "b3", "--json"
    )
    assert code == 0, err
    res = json.loads(out)
    assert (res["branch"], res["batch"]) == ("b3", "b3")
    assert load_batch(lake, "b3").table_ids == (ORD,)


def test_batch_readiness_is_every_tables(lake: Lakehouse) -> None:
    ready = batch_readiness(lake, "b1")
    assert [t.table for t in ready.tables] == [str(ITM), str(ORD)]
    assert ready.allowed and ready.code == "ok" and ready.atomicity is Atomicity.ATOMIC
    lake.spark.createDataFrame([(99, "zed")], "id bigint, name string").writeTo(
        lake.spark_name(ORD, "b1")
    ).append()  # a later commit on one table: its audit is stale, the batch may not be published
    ready = batch_readiness(lake, "b1")
    assert not ready.allowed and ready.forceable and ready.code == "stale"
    assert [t.table for t in ready.refusals] == [str(ORD)] and str(ORD) in ready.message


def test_a_table_of_a_batch_is_not_published_alone(lake: Lakehouse) -> None:
    main = refs(lake, ORD)["main"]
    for user, force in ((ANN, False), (ROOT_, True)):  # not forceable either: all tables or none
        with pytest.raises(RefusedError, match=r"belongs to batch w2 with shop\.items"):
            publish(lake, ORD, "w2", user=user, force=force, reason="alone" if force else None)
    assert refs(lake, ORD)["main"] == main and "w2" in refs(lake, ORD)
    refused = lake.journal.history(str(ORD), branch="w2", action=Action.PUBLISH)
    assert [e.outcome for e in refused] == [Outcome.REFUSED, Outcome.REFUSED]
    assert batch_readiness(lake, "w2").allowed  # the batch itself may be published
    assert publish_readiness(lake, ORD, "b3").allowed  # a batch of one table is a branch
