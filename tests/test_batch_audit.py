"""Audit and review of a batch that spans tables (issue 27, items 2 and 3) on real Spark + Iceberg.

One module-scoped lakehouse, seeded once: ``air.airports`` (JFK, LAX), ``air.carriers`` (AA) and
``air.flights`` whose suite has ``references(dest -> air.airports.faa)`` (fail) and
``references(carrier -> air.carriers.code)`` (warn). The tests run in order on one story:

1. the week's flights to SJU and STT fail ``references`` while the airports are only on main; adding the
   two airports to the same batch (``ingest --batch``) makes them pass: the ingest re-audits the flights,
   whose check reads the airports at the batch's head (its message says so). ``air.carriers`` is not in
   the batch: it is read at main, even though it has a plain branch of the batch's name holding the
   carrier the flights lack;
2. ``audit_batch``: the worst table's status; nothing re-runs while nothing changed; a commit on the
   airports re-audits the airports and the flights (which read them) only, and the flights' audit
   re-measures only its ``references(dest ...)`` (the result cache's rows tell); a commit on the flights
   re-audits the flights alone;
3. reviews bind to the batch's heads: an author of the airports may not approve the batch (nor the
   flights alone); another approver's batch approval counts on both tables, and a new commit on the
   airports dismisses it on the flights too; a request for changes on the batch blocks every table;
4. the CLI: ``audit --batch`` / ``approve --batch`` / ``request-changes --batch`` exit codes and JSON,
   TABLE BRANCH and --batch both or neither (exit 2, one line).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ANN, BOB, SAM, cli_as, lake_settings, refs, seed_tables, write_csv
from sqlalchemy import and_, func, select

from wap_core import Lakehouse, TableId
from wap_core.analysis.explore import failing_rows_request
from wap_core.checks.store import check_results_table
from wap_core.exceptions import RefusedError
from wap_core.states import CheckStatus
from wap_core.workflow.audit import latest_audit, run_audit
from wap_core.workflow.batch import batch_of, load_batch
from wap_core.workflow.batch_audit import audit_batch, stale_tables
from wap_core.workflow.ingest import ingest
from wap_core.workflow.readiness import batch_readiness
from wap_core.workflow.review import (
    ReviewState,
    Verdict,
    approve,
    approve_batch,
    request_changes_batch,
    review_state,
)
from wap_core.workflow.status import list_branches

AIR, CAR, FLT = TableId("air", "airports"), TableId("air", "carriers"), TableId("air", "flights")
BATCH = "w2"
DEST = "references(dest -> air.airports.faa)"
CARRIER = "references(carrier -> air.carriers.code)"
CHECKS = """\
air.flights:
  checks:
    - not_null: [id]
    - references: {column: dest, table: air.airports, ref_column: faa}
    - references: {column: carrier, table: air.carriers, ref_column: code, level: warn}
air.airports:
  checks:
    - not_null: [faa]
"""
ACCESS = """\
roles:
  viewer: ["*"]
  steward: [sam@corp.test]
  approver: [ann@corp.test, bob@corp.test]
  admin: [root]
policies:
  "*": {approvals: 0}
  "air.*": {approvals: 1, author_cannot_approve: true}
"""


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("batch_audit")
    settings = lake_settings(
        home, "batch_audit", CHECKS, access_path=home / "access.yml", ingest_roots=(home,)
    )
    lh = Lakehouse(settings)
    seed_tables(lh, [AIR], home / "src", ("faa", "name"), (("JFK", "Kennedy"), ("LAX", "Los Angeles")))
    seed_tables(lh, [CAR], home / "src", ("code", "name"), (("AA", "American"),))
    seed_tables(lh, [FLT], home / "src", ("id", "dest", "carrier"), ((1, "JFK", "AA"),))
    settings.access_file.write_text(ACCESS)
    return lh


def src(lh: Lakehouse, name: str, header: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    return write_csv(Path(lh.settings.home) / "src" / f"{name}.csv", header, rows)


def check(lh: Lakehouse, table: TableId, name: str) -> tuple[CheckStatus, str, object]:
    audit = latest_audit(lh, table, BATCH)
    assert audit is not None
    c = next(c for c in audit.checks if c.name == name)
    return c.status, c.message, c.observed


def audit_rows(lh: Lakehouse, table: TableId) -> int:
    return sum(1 for a in lh.journal.audit_record(str(table)) if a.branch == BATCH)


def cached(lh: Lakehouse, table: TableId, head: int) -> int:
    """The measurements stored for ``table``'s ``head`` (one row per check measured at that head)."""
    t = check_results_table.c
    q = select(func.count()).where(and_(t.table_name == str(table), t.head_snapshot_id == head))
    with lh.journal.engine.connect() as conn:
        return int(conn.execute(q).scalar_one())


def append(lh: Lakehouse, table: TableId, rows: list[tuple[object, ...]], schema: str) -> None:
    """A new commit on the table's batch branch (not through ingest: the batch's head moves)."""
    lh.spark.createDataFrame(rows, schema).writeTo(lh.spark_name(table, BATCH)).append()


def test_references_reads_a_table_of_the_batch_at_its_head(lake: Lakehouse) -> None:
    r = ingest(
        lake,
        FLT,
        [src(lake, "f1", ("id", "dest", "carrier"), [(10, "SJU", "AA"), (11, "STT", "ZZ")])],
        batch=BATCH,
        user=SAM,
    )
    # the carrier ZZ is on a plain branch of the batch's name: not a member, so not read
    ingest(lake, CAR, [src(lake, "c1", ("code", "name"), [("ZZ", "Zed Air")])], branch=BATCH, user=SAM)
    assert batch_of(lake, CAR, BATCH) is None and load_batch(lake, BATCH).table_ids == (FLT,)
    assert r.audit.status is CheckStatus.FAILED  # on main, the airports lack SJU and STT
    status, msg, _ = check(lake, FLT, DEST)
    assert status is CheckStatus.FAILED and "2 rows" in msg and "batch" not in msg
    assert run_audit(lake, FLT, BATCH, user=SAM).status is CheckStatus.FAILED  # same on a re-audit
    flights_audits = audit_rows(lake, FLT)

    # the airports join the batch: the ingest re-audits the flights, whose check reads them at w2's head
    a = ingest(
        lake,
        AIR,
        [src(lake, "a1", ("faa", "name"), [("SJU", "San Juan"), ("STT", "St Thomas")])],
        batch=BATCH,
        user=ANN,
    )
    assert a.audit.passed and load_batch(lake, BATCH).table_ids == (AIR, FLT)
    assert audit_rows(lake, FLT) == flights_audits + 1
    head = refs(lake, AIR)[BATCH]
    status, msg, observed = check(lake, FLT, DEST)
    assert status is CheckStatus.PASSED, msg
    assert (
        msg
        == f"every dest exists in air.airports.faa (read air.airports at batch w2's head, snapshot {head})"
    )
    assert isinstance(observed, dict) and observed["read_at"] == f"batch w2's head, snapshot {head}"
    # air.carriers is not in the batch: read at main (ZZ is only on its plain branch w2), a warning
    status, msg, observed = check(lake, FLT, CARRIER)
    assert status is CheckStatus.WARNED and "1 rows" in msg and "batch" not in msg
    assert isinstance(observed, dict) and "read_at" not in observed
    flights = latest_audit(lake, FLT, BATCH)
    assert flights is not None and flights.batch_reads == {str(AIR): head}
    # Explore's failing rows read as the audit does: none left for the airports check
    req = failing_rows_request(lake, FLT, BATCH, DEST, user=SAM)
    assert len(req.read(lake).rows) == 0


def test_batch_verdict_is_the_worst_and_only_what_changed_is_audited_again(lake: Lakehouse) -> None:
    before = {t: audit_rows(lake, t) for t in (AIR, FLT)}
    res = audit_batch(lake, BATCH, user=SAM)
    assert res.reaudited == () and {t: audit_rows(lake, t) for t in (AIR, FLT)} == before  # nothing stale
    assert res.status is CheckStatus.WARNED and res.passed  # airports passed, flights warned
    assert [a.table for a in res.tables] == [str(AIR), str(FLT)]

    # a commit on the airports: they and the flights (whose check reads them) are stale, nothing else
    flights_head = refs(lake, FLT)[BATCH]
    measured = cached(lake, FLT, flights_head)
    append(lake, AIR, [("BQN", "Aguadilla")], "faa string, name string")
    assert stale_tables(lake, load_batch(lake, BATCH)) == (AIR, FLT)
    res = audit_batch(lake, BATCH, user=SAM)
    assert res.reaudited == (str(AIR), str(FLT))
    assert {t: audit_rows(lake, t) for t in (AIR, FLT)} == {AIR: before[AIR] + 1, FLT: before[FLT] + 1}
    # the flights' audit re-measured its airports check only (its head did not move: one new cache row)
    assert cached(lake, FLT, flights_head) == measured + 1
    new_head = refs(lake, AIR)[BATCH]
    assert f"snapshot {new_head}" in check(lake, FLT, DEST)[1]

    # a commit on the flights: only the flights are audited again (no check of the airports reads them)
    append(lake, FLT, [(12, "BQN", "AA")], "id bigint, dest string, carrier string")
    res = audit_batch(lake, BATCH, user=SAM)
    assert res.reaudited == (str(FLT),) and res.status is CheckStatus.WARNED
    assert audit_rows(lake, AIR) == before[AIR] + 1
    # a failing table fails the batch
    append(lake, FLT, [(13, "XXX", "AA")], "id bigint, dest string, carrier string")
    res = audit_batch(lake, BATCH, user=SAM)
    assert res.reaudited == (str(FLT),) and res.status is CheckStatus.FAILED and not res.passed
    append(lake, AIR, [("XXX", "Nowhere")], "faa string, name string")  # fixed inside the batch
    res = audit_batch(lake, BATCH, user=SAM)
    assert res.reaudited == (str(AIR), str(FLT)) and res.status is CheckStatus.WARNED


def test_approvals_bind_to_the_batch_heads(lake: Lakehouse) -> None:
    # ann wrote the airports: under author_cannot_approve she may approve neither the batch nor the flights
    with pytest.raises(RefusedError, match="author of a table of batch w2"):
        approve_batch(lake, BATCH, user=ANN)
    with pytest.raises(RefusedError, match="author of a table of batch w2"):
        approve(lake, FLT, BATCH, user=ANN)
    assert review_state(lake, FLT, BATCH).state is ReviewState.AWAITING

    heads = load_batch(lake, BATCH).heads
    br = approve_batch(lake, BATCH, user=BOB, comment="flights with their airports")
    assert br.heads == heads and br.state is ReviewState.APPROVED and br.verdict is Verdict.APPROVED
    for t in (AIR, FLT):
        rs = review_state(lake, t, BATCH)
        assert rs.state is ReviewState.APPROVED and rs.approved_by == [BOB] and rs.heads == heads
    ready = batch_readiness(lake, BATCH)
    assert ready.allowed, ready.message
    assert {
        (b.table, b.review) for b in list_branches(lake) if b.branch == BATCH and b.table != str(CAR)
    } == {
        (str(AIR), ReviewState.APPROVED),
        (str(FLT), ReviewState.APPROVED),
    }
    entries = [e for e in lake.journal.history(limit=10) if e.action.value == "approve" and e.user == BOB]
    assert {e.table for e in entries[:2]} == {str(AIR), str(FLT)}
    assert all(e.details == {"batch": BATCH, "heads": heads} for e in entries[:2])

    # a new commit on the airports dismisses the approval on the flights too (whose head did not move)
    flights_head = refs(lake, FLT)[BATCH]
    append(lake, AIR, [("PSE", "Ponce")], "faa string, name string")
    rs = review_state(lake, FLT, BATCH)
    assert rs.head == flights_head and rs.state is ReviewState.AWAITING
    assert [r.user for r in rs.dismissed] == [BOB]
    # branches (many heads in few queries) binds the same way, also when listing one table
    assert [b.review for b in list_branches(lake, FLT) if b.branch == BATCH] == [ReviewState.AWAITING]
    # the flights' audit read the airports' previous head: stale in effect, the batch may not be published
    ready = batch_readiness(lake, BATCH)
    assert [(t.table, t.check.code) for t in ready.refusals][-1] == (str(FLT), "stale"), ready.message
    audit_batch(lake, BATCH, user=SAM)
    ready = batch_readiness(lake, BATCH)
    assert not ready.allowed and ready.code == "approvals_missing", ready.message

    # a per-table approval inside the batch binds to the batch's heads too; a request for changes on the
    # batch then blocks every table
    approve(lake, FLT, BATCH, user=BOB)
    assert review_state(lake, FLT, BATCH).state is ReviewState.APPROVED
    assert review_state(lake, AIR, BATCH).state is ReviewState.AWAITING
    br = request_changes_batch(lake, BATCH, user=BOB, comment="PSE has no coordinates")
    assert br.state is ReviewState.CHANGES_REQUESTED
    assert all(review_state(lake, t, BATCH).state is ReviewState.CHANGES_REQUESTED for t in (AIR, FLT))


def test_cli_audit_and_reviews_of_a_batch(lake: Lakehouse) -> None:
    code, out, err = cli_as(lake, SAM, "audit", "--batch", BATCH, "--json")
    assert code == 0, err
    res = json.loads(out)
    assert list(res) == ["batch", "status", "tables", "reaudited"]
    assert (res["batch"], res["status"], res["reaudited"]) == (BATCH, "warned", [])
    assert [t["table"] for t in res["tables"]] == [str(AIR), str(FLT)]
    code, out, _ = cli_as(lake, SAM, "audit", "--batch", BATCH)
    assert code == 0 and out.startswith("audit of batch w2: WARNED")

    code, out, err = cli_as(lake, ANN, "approve", "--batch", BATCH)
    assert code == 1 and "author of a table of batch w2" in err
    code, out, err = cli_as(lake, BOB, "approve", "--batch", BATCH, "--json")
    assert code == 0, err
    res = json.loads(out)
    assert (res["batch"], res["verdict"], res["review"]) == (BATCH, "approved", "approved")
    assert res["heads"] == load_batch(lake, BATCH).heads
    assert [t["table"] for t in res["tables"]] == [str(AIR), str(FLT)]
    assert all(t["review"] == "approved" and t["heads"] == res["heads"] for t in res["tables"])
    code, out, err = cli_as(lake, BOB, "request-changes", "--batch", BATCH, "--comment", "wait", "--json")
    assert code == 0 and json.loads(out)["review"] == "changes_requested", err

    # a failing batch exits 1
    append(lake, FLT, [(14, "YYY", "AA")], "id bigint, dest string, carrier string")
    code, out, _ = cli_as(lake, SAM, "audit", "--batch", BATCH, "--json")
    assert code == 1 and json.loads(out)["reaudited"] == [str(FLT)]

    # TABLE BRANCH or --batch: both or neither (exit 2, one line); an unknown batch is not found (2)
    for args in (
        ["audit", str(FLT), BATCH, "--batch", BATCH],
        ["audit", str(FLT)],
        ["approve", "--batch", "nope"],
    ):
        code, out, err = cli_as(lake, BOB, *args)
        assert code == 2 and len(err.strip().splitlines()) == 1, (args, err)
    # a plain branch keeps its command line
    code, out, err = cli_as(lake, SAM, "audit", str(CAR), BATCH, "--json")
    assert code == 0 and json.loads(out)["branch"] == BATCH, err


@pytest.mark.postgres
def test_batch_audit_and_review_on_postgresql(postgres: str, tmp_path: Path, spark_session: None) -> None:
    """The same on a PostgreSQL catalog and journal: the batch's reads, its audit, reviews bound to its heads
    (migration 0008's column, one transaction over both tables)."""
    home = tmp_path / "lh"
    settings = lake_settings(
        home,
        "pg_batch_audit",
        CHECKS.replace("air.", "pgb."),
        catalog_uri=postgres,
        access_path=home / "access.yml",
        ingest_roots=(tmp_path,),
    )
    lh = Lakehouse(settings)
    air, flt = TableId("pgb", "airports"), TableId("pgb", "flights")
    seed_tables(lh, [air], home / "src", ("faa", "name"), (("JFK", "Kennedy"),))
    seed_tables(lh, [TableId("pgb", "carriers")], home / "src", ("code", "name"), (("AA", "American"),))
    seed_tables(lh, [flt], home / "src", ("id", "dest", "carrier"), ((1, "JFK", "AA"),))
    settings.access_file.write_text(ACCESS.replace("air.*", "pgb.*"))
    f = write_csv(tmp_path / "f.csv", ("id", "dest", "carrier"), [(10, "SJU", "AA")])
    assert ingest(lh, flt, [f], batch="pw", user=SAM).audit.status is CheckStatus.FAILED
    a = write_csv(tmp_path / "a.csv", ("faa", "name"), [("SJU", "San Juan")])
    assert ingest(lh, air, [a], batch="pw", user=ANN).audit.passed
    res = audit_batch(lh, "pw", user=SAM)
    assert res.reaudited == () and res.status is CheckStatus.PASSED  # the ingest re-audited the flights
    with pytest.raises(RefusedError, match="author of a table of batch pw"):
        approve_batch(lh, "pw", user=ANN)
    assert approve_batch(lh, "pw", user=BOB).state is ReviewState.APPROVED
    assert batch_readiness(lh, "pw").allowed
    lh.spark.createDataFrame([("PSE", "Ponce")], "faa string, name string").writeTo(
        lh.spark_name(air, "pw")
    ).append()
    assert review_state(lh, flt, "pw").state is ReviewState.AWAITING
    assert audit_batch(lh, "pw", user=SAM).reaudited == (str(air), str(flt))
