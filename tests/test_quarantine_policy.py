"""``on_fail: quarantine`` (issue 29 item 3) and two quarantines of one branch at once (item 5), on real Spark +
Iceberg, notifications on a real HTTP receiver.

One module-scoped lakehouse: ``shop.orders`` (id, name, qty) whose main also holds a NULL name and a negative
qty (main's own rows, which must stay), its checks ``not_null(name)`` and ``range(qty)`` with ``on_fail:
quarantine`` and ``unique(id)`` without; ``shop.items`` with a plain ``not_null(name)``. Access: sam is
steward, vic a viewer, root admin; no approvals needed. Proved here: the checks file's parse errors; an
ingest (API, CLI, pipeline) whose policy checks fail quarantines their failing rows as the ingesting user,
re-audits, and says so in its JSON; the notification carries the counts and the Quarantine page's link (and
the ingest's first, failed audit is not announced); other failing checks still fail it; the pipeline and the
CLI publish the good rows with the kept ones; a user who may not quarantine leaves the ingest as it was; two
quarantines of one branch at once: one lands, the other is refused, both journaled, the books balance.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import SAM, cli_as, lake_settings, refs, write_csv
from test_notify import Receiver, wait_until

from wap_core import Lakehouse, TableId, notify, pipeline
from wap_core.checks import parse_checks, suite_for
from wap_core.exceptions import ChecksFileError, RefusedError
from wap_core.faults import PAUSE_ENV
from wap_core.lake import catalog as cat
from wap_core.session import session_of
from wap_core.states import Action, CheckStatus, OnFail, Outcome
from wap_core.values import to_jsonable
from wap_core.workflow.audit import latest_audit
from wap_core.workflow.batch import load_batch
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.quarantine import quarantine, quarantine_table_id
from wap_core.workflow.quarantine_policy import apply_policy

ORD, ITM = TableId("shop", "orders"), TableId("shop", "items")
QORD, QITM = quarantine_table_id(ORD), quarantine_table_id(ITM)
HEADER = ("id", "name", "qty")
VIC = "vic@corp.test"
CONSOLE = "http://console.test:8501"
CHECKS = """\
shop.orders:
  checks:
    - not_null: {columns: [name], on_fail: quarantine}
    - range: {column: qty, min: 0, on_fail: quarantine}
    - unique: [id]
    - row_count: {min: 1}
shop.items:
  checks:
    - not_null: [name]
"""
ACCESS = f"""\
roles:
  viewer: ["*", {VIC}]
  steward: [{SAM}]
  admin: [root]
policies:
  "*": {{approvals: 0}}
"""
MAIN_ROWS = [(1, "ann", 5), (2, None, 3), (3, "cy", -1)]  # main's own failing rows: they stay
# 11 NULL name, 12 negative qty, 13 both: 3 rows quarantined (not_null 2, range 2), 2 kept
BATCH = [(10, "a", 1), (11, None, 2), (12, "b", -5), (13, None, -1), (15, "f", 3)]
POLICY_REASON = "on_fail: quarantine (checks not_null(name), range(qty))"


@dataclass
class Lake:
    lh: Lakehouse
    receiver: Receiver


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Iterator[Lake]:
    receiver = Receiver()
    home = tmp_path_factory.mktemp("qpolicy")
    settings = lake_settings(home, "qpolicy", "{}\n", access_path=home / "access.yml", ingest_roots=(home,))
    lh = Lakehouse(settings)
    for t in (ORD, ITM):  # main seeded before the checks exist (its failing rows are main's own)
        ingest(
            lh,
            t,
            [write_csv(home / "src" / f"{t.name}0.csv", HEADER, MAIN_ROWS)],
            create=True,
            branch="first",
        )
        publish(lh, t, "first")
    settings.checks_file.write_text(CHECKS)
    settings.access_file.write_text(ACCESS)
    (home / "notify.yml").write_text(
        f"console_url: {CONSOLE}\nwebhooks:\n  - url: {receiver.url('/hook')}\n    format: json\n"
        '    tables: ["shop.*"]\n'
        "delivery: {attempts: 3, backoff_seconds: 0.05, timeout_seconds: 5, exit_grace_seconds: 5}\n"
    )
    yield Lake(lh, receiver)
    notify.stop_all()
    receiver.close()


def src(lh: Lakehouse, name: str, rows: list[tuple[object, ...]]) -> str:
    return write_csv(Path(lh.settings.home) / "src" / f"{name}.csv", HEADER, rows)


def count(lh: Lakehouse, table: TableId, ref: str, where: str = "true") -> int:
    if ref == "main" and (not cat.table_exists(lh.catalog, table) or "main" not in refs(lh, table)):
        return 0  # a quarantine table not created yet, or nothing published to it yet
    return int(lh.spark.sql(f"SELECT count(*) FROM {lh.sql_name(table, ref)} WHERE {where}").first()[0])


def events(rec: Receiver, branch: str) -> list[dict[str, Any]]:
    return [r.json for r in rec.on("/hook") if r.json.get("branch") == branch]


def settled(lh: Lakehouse) -> None:
    """Every queued notification delivered (or given up)."""
    wait_until(
        lambda: all(r.status in ("delivered", "failed") for r in notify.outbox(lh.journal)),
        60,
        "the outbox to settle",
    )


# ----------------------------------------------------------------------------- the checks file
def test_on_fail_is_parsed_and_refused_where_rows_cannot_be_removed() -> None:
    suites = parse_checks(CHECKS, "checks.yml")
    got = {c.name: c.on_fail for c in suites[str(ORD)].checks}
    assert got == {
        "not_null(name)": OnFail.QUARANTINE,
        "range(qty)": OnFail.QUARANTINE,
        "unique(id)": OnFail.FAIL,
        "row_count": OnFail.FAIL,
    }
    # on_fail changes no measurement: the check's fingerprint arguments are the same
    plain = parse_checks("a.b:\n  checks:\n    - not_null: [name]\n")["a.b"].checks[0]
    assert suites[str(ORD)].checks[0].args == plain.args == {}
    for line, message in [
        ("- row_count: {min: 1, on_fail: quarantine}", "only for row-level checks"),
        (
            "- freshness: {column: ts, max_age: 1d, on_fail: quarantine}",
            "cannot be repaired by removing rows",
        ),
        ("- not_null: {columns: [x], on_fail: drop}", "on_fail must be 'fail' or 'quarantine', not 'drop'"),
        ("- not_null: {columns: [x], on_fail: quarantine, level: warn}", "needs level: fail"),
    ]:
        text = f"a.b:\n  checks:\n    - unique: [id]\n    {line}\n"
        with pytest.raises(ChecksFileError) as err:
            parse_checks(text, "checks.yml")
        assert str(err.value).startswith("checks.yml:4:") and message in str(err.value), err.value


# ----------------------------------------------------------------------------- an ingest repairs its batch
def test_an_ingest_quarantines_the_policy_checks_failing_rows(lake: Lake) -> None:
    lh, rec = lake.lh, lake.receiver
    fork = refs(lh, ORD)["main"]
    r = ingest(lh, ORD, [src(lh, "p1", BATCH)], branch="p1", user=SAM)
    q = r.quarantine
    assert q is not None and q.outcome is Outcome.QUARANTINED
    assert q.failed_checks == ("not_null(name)", "range(qty)") and q.reason == POLICY_REASON
    assert q.checks == {"not_null(name)": 2, "range(qty)": 2}
    assert (q.quarantined, q.rows_before, q.rows_after, q.quarantine_table) == (3, 5, 2, str(QORD))
    # the branch is the repaired one, audited again: it passes
    head = refs(lh, ORD)["p1"]
    assert q.new_head == head == r.snapshot_id != q.old_head and r.audit.snapshot_id == head
    assert r.audit.status is CheckStatus.PASSED and r.rows_written == 5
    assert latest_audit(lh, ORD, "p1").snapshot_id == head  # type: ignore[union-attr]
    # main's own failing rows are still on the branch; the batch's failing rows are kept, with why and who
    assert count(lh, ORD, "p1") == len(MAIN_ROWS) + 2 and refs(lh, ORD)["main"] == fork
    assert count(lh, ORD, "p1", "name IS NULL") == 1 and count(lh, ORD, "p1", "qty < 0") == 1
    kept = {row["id"]: row for row in lh.spark.sql(f"SELECT * FROM {lh.sql_name(QORD, 'p1')}").collect()}
    assert set(kept) == {11, 12, 13}
    assert kept[13]["_wap_checks"] == ["not_null(name)", "range(qty)"]
    assert (kept[12]["_wap_reason"], kept[12]["_wap_user"], kept[12]["_wap_batch"]) == (
        POLICY_REASON,
        SAM,
        "p1",
    )
    # journaled as the ingesting user's quarantine; the quarantine table joined the batch
    (done,) = lh.journal.history(str(ORD), branch="p1", action=Action.QUARANTINE)
    assert (done.outcome, done.user, done.reason) == (Outcome.QUARANTINED, SAM, POLICY_REASON)
    assert done.details["checks"] == q.checks and done.details["quarantined"] == 3
    assert load_batch(lh, "p1").table_ids == (ORD, QORD)
    # ONE notification: quarantined, with the counts and the Quarantine page's link; the first (failed)
    # audit is not announced
    wait_until(lambda: events(rec, "p1"), 60, "the p1 notification")
    settled(lh)
    (note,) = events(rec, "p1")
    assert note["event"] == "quarantined"
    assert note["link"] == f"{CONSOLE}/quarantine?table=shop.orders&batch=p1"
    assert (note["user"], note["status"], note["failed_checks"]) == (SAM, "passed", [])
    assert note["quarantine"] == {
        "checks": {"not_null(name)": 2, "range(qty)": 2},
        "quarantined": 3,
        "quarantine_table": str(QORD),
        "rows_before": 5,
        "rows_after": 2,
    }
    assert "3 of 5 rows quarantined" in note["summary"] and "on_fail: quarantine" in note["summary"]


def test_the_cli_publishes_the_good_rows_with_the_kept_ones(lake: Lake) -> None:
    lh = lake.lh
    main_before, qmain_before = count(lh, ORD, "main"), 0
    code, out, err = cli_as(lh, "root", "publish", "--batch", "p1", "--json")
    assert code == 0, err
    assert {t["table"] for t in json.loads(out)["tables"]} == {str(ORD), str(QORD)}
    assert count(lh, ORD, "main") == main_before + 2
    assert count(lh, QORD, "main") == qmain_before + 3
    assert "p1" not in refs(lh, ORD) and "p1" not in refs(lh, QORD)


def test_cli_ingest_json_other_failing_checks_still_fail(lake: Lake) -> None:
    lh, rec = lake.lh, lake.receiver
    rows = [(20, "ok", 1), (21, None, 1), (22, "dup", 1), (22, "dup2", 1)]  # unique(id) has no policy
    code, out, err = cli_as(lh, SAM, "ingest", str(ORD), src(lh, "c1", rows), "--branch", "c1", "--json")
    assert code == 1, err  # the audit still fails: unique(id)
    got = json.loads(out)
    q = got["quarantine"]
    assert (q["policy"], q["outcome"], q["checks"], q["quarantined"]) == (
        "on_fail: quarantine",
        "quarantined",
        {"not_null(name)": 1},
        1,
    )
    assert (
        q["failed_checks"] == ["not_null(name)"]
        and q["reason"] == "on_fail: quarantine (check not_null(name))"
    )
    assert got["status"] == "failed" and got["audit"]["snapshot_id"] == got["snapshot_id"] == q["new_head"]
    assert [c["name"] for c in got["audit"]["checks"] if c["status"] == "failed"] == ["unique(id)"]
    assert count(lh, ORD, "c1", "id >= 20") == 3 and count(lh, QORD, "c1", "id = 21") == 1
    rec.wait_for("/hook", 1)
    wait_until(lambda: len(events(rec, "c1")) >= 2, 60, "the c1 notifications")
    settled(lh)
    by = {e["event"]: e for e in events(rec, "c1")}
    assert sorted(by) == ["audit_failed", "quarantined"]
    assert by["quarantined"]["status"] == "failed" and by["quarantined"]["failed_checks"] == ["unique(id)"]
    assert by["audit_failed"]["failed_checks"] == ["unique(id)"]  # the re-audit, on the Review page
    assert by["audit_failed"]["link"] == f"{CONSOLE}/review?table=shop.orders&branch=c1"
    # without --json: one more line on stderr
    code, out, err = cli_as(
        lh, SAM, "ingest", str(ORD), src(lh, "c2", [(23, None, 1), (24, "ok", 1)]), "--branch", "c2"
    )
    assert code == 0 and out.strip() == "c2", err
    assert f"on_fail: quarantine: quarantined 1 of 2 rows into {QORD} (not_null(name) 1); head " in err
    # a JSON without a policy quarantine has no quarantine key
    code, out, _ = cli_as(
        lh, SAM, "ingest", str(ITM), src(lh, "i1", [(5, "x", 1)]), "--branch", "i1", "--json"
    )
    assert code == 0 and "quarantine" not in json.loads(out)


def test_the_pipeline_publishes_the_good_rows(lake: Lake) -> None:
    lh = lake.lh
    steward, approver = session_of(lh, SAM), session_of(lh, "root")
    main_before, qmain_before = count(lh, ORD, "main"), count(lh, QORD, "main")
    b = pipeline.ingest(ORD, [src(lh, "pipe", [(30, "ok", 1), (31, None, 1), (32, "ok", 2)])], lh=steward)
    assert (b.status, b.quarantined, b.quarantine_table, b.batch) == (CheckStatus.PASSED, 1, str(QORD), None)
    assert pipeline.Branch.from_dict(json.loads(json.dumps(to_jsonable(b)))) == b
    assert pipeline.wait_for_decision(ORD, b.branch, timeout=0, lh=approver) is pipeline.Decision.APPROVED
    res = pipeline.publish_if_passed(ORD, b.branch, lh=approver)
    assert res.table == str(ORD) and res.moved_main
    assert count(lh, ORD, "main") == main_before + 2 and count(lh, QORD, "main") == qmain_before + 1
    assert pipeline.decision_now(ORD, b.branch, lh=approver) is pipeline.Decision.PUBLISHED
    # a repaired branch is discarded with its kept rows (a pipeline's rollback)
    d = pipeline.ingest(ORD, [src(lh, "pipe2", [(40, None, 1), (41, "ok", 1)])], lh=steward)
    assert d.quarantined == 1 and d.branch in refs(lh, QORD)
    assert pipeline.discard(ORD, d.branch, reason="rolled back", lh=approver)
    assert d.branch not in refs(lh, ORD) and d.branch not in refs(lh, QORD)
    # a named batch (several tables): the quarantine table joins it, the batch steps publish all three
    main_before, qmain_before = count(lh, ORD, "main"), count(lh, QORD, "main")
    bb = pipeline.ingest_batch(
        [
            (ITM, [src(lh, "bitems", [(70, "ok", 1)])]),
            (ORD, [src(lh, "bord", [(71, None, 1), (72, "ok", 1)])]),
        ],
        batch="bq",
        lh=steward,
    )
    assert [(x.table, x.batch, x.quarantined) for x in bb.branches] == [
        (str(ITM), "bq", 0),
        (str(ORD), "bq", 1),
    ]
    assert bb.passed and set(load_batch(lh, "bq").table_ids) == {ITM, ORD, QORD}
    assert {t.table for t in pipeline.publish_batch_if_passed("bq", lh=approver).tables} == {
        str(ITM),
        str(ORD),
        str(QORD),
    }
    assert count(lh, ORD, "main") == main_before + 1 and count(lh, QORD, "main") == qmain_before + 1


def test_a_user_who_may_not_quarantine_leaves_the_ingest_as_it_was(lake: Lake) -> None:
    """INGEST and QUARANTINE both need a steward today, so this is the hook alone: vic (a viewer) after a
    failed audit of a table whose suite says on_fail: quarantine."""
    lh = lake.lh
    r = ingest(lh, ITM, [src(lh, "v1", [(50, None, 1), (51, "ok", 1)])], branch="v1", user=SAM)
    assert r.quarantine is None and r.audit.status is CheckStatus.FAILED
    head = refs(lh, ITM)["v1"]
    suite = parse_checks("shop.items:\n  checks:\n    - not_null: {columns: [name], on_fail: quarantine}\n")
    audit, q = apply_policy(session_of(lh, VIC), ITM, "v1", suite[str(ITM)], r.audit)
    assert audit is r.audit and q is not None and q.outcome is Outcome.REFUSED and q.code == "forbidden"
    assert "may not quarantine" in (q.refused or "")
    assert refs(lh, ITM)["v1"] == head
    assert not cat.table_exists(lh.catalog, QITM) or "v1" not in refs(lh, QITM)
    last = lh.journal.history(str(ITM), branch="v1", action=Action.QUARANTINE)[0]
    assert (last.outcome, last.user) == (Outcome.REFUSED, VIC)
    assert suite_for(lh.settings.checks_file, ITM).checks[0].on_fail is OnFail.FAIL


# ----------------------------------------------------------------------------- twice at once
def test_two_quarantines_of_one_branch_at_once_one_lands(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first holds its intent (paused right after it); the second, started meanwhile, is refused (the
    branch is busy), journaled; the first lands; the rows are kept once and the books balance."""
    lh = lake.lh
    rows = [(60, None, 1), (61, "ok", 1), (62, None, 2), (63, "ok", 3)]
    r = ingest(lh, ITM, [src(lh, "twice", rows)], branch="twice", user=SAM)
    assert r.audit.status is CheckStatus.FAILED
    head, main_rows = refs(lh, ITM)["twice"], count(lh, ITM, "main")
    monkeypatch.setenv(PAUSE_ENV, "after_quarantine_intent=6")
    results: dict[str, Any] = {}

    def first() -> None:
        try:
            results["first"] = quarantine(Lakehouse(lh.settings), ITM, "twice", reason="first", user=SAM)
        except Exception as exc:
            results["first"] = exc

    t = threading.Thread(target=first)
    t.start()
    wait_until(lambda: lh.journal.pending_intent_on(str(ITM), "twice"), 120, "the first quarantine's intent")
    t0 = time.monotonic()
    with pytest.raises(RefusedError) as err:
        quarantine(lh, ITM, "twice", reason="second", user="root")
    t.join(120)
    assert time.monotonic() - t0 < 60
    assert err.value.reason_code == "conflict" and "busy" in str(err.value).lower(), err.value
    won = results["first"]
    assert not isinstance(won, Exception), won
    assert won.quarantined == 2 and won.rows_before == 4 and won.rows_after == 2
    # journaled: one quarantined (sam), one refused (root); nothing pending
    entries = lh.journal.history(str(ITM), branch="twice", action=Action.QUARANTINE)
    assert sorted((e.user, e.outcome) for e in entries) == [
        ("root", Outcome.REFUSED),
        (SAM, Outcome.QUARANTINED),
    ]
    assert lh.journal.pending_intent_on(str(ITM), "twice") is None
    # nothing half-done: the rows kept once, the books balance, no temp branch left
    assert refs(lh, ITM)["twice"] == won.new_head != head
    assert count(lh, QITM, "twice", "id >= 60") == 2
    assert count(lh, ITM, "twice") == main_rows + 2 == main_rows + won.rows_before - won.quarantined
    assert not [n for n in refs(lh, ITM) if n.startswith("twice") and n != "twice"]
