"""Row samples are trimmed before they are serialised: huge malformed rows keep a valid, useful sample."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import write_csv

from wap_core import TableId
from wap_core.lake.catalog import lineage, summary_get
from wap_core.samples import BUDGET_CHARS, load_sample, sample_json, trim_rows
from wap_core.workflow.audit import run_audit
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.rebase import rebase

T = TableId("demo", "wide")
HEADER = ["id", "name", "age"]
BIG = "x" * 50_000


def test_sample_json_is_always_valid_and_within_the_budget() -> None:
    rows = [
        {"_corrupt_record": f"{i}," + BIG, "__problem": "ragged or unparsable line", "__line": i}
        for i in range(20)
    ]
    text = sample_json(rows)
    assert len(text) <= BUDGET_CHARS
    back = json.loads(text)
    assert 1 <= len(back) <= 10
    assert back[0]["_corrupt_record"].endswith("…") and len(back[0]["_corrupt_record"]) == 201
    assert back[0]["__line"] == 0
    # a tiny budget drops whole rows, never cuts one
    assert json.loads(sample_json(rows, budget=300)) == trim_rows(rows)[:1]
    assert sample_json(rows, budget=10) == "[]"


def test_a_sample_cut_by_an_older_version_reads_as_empty_not_a_crash() -> None:
    cut = json.dumps([{"_corrupt_record": BIG}])[:8000]
    assert load_sample(cut) == []
    assert load_sample(None) == [] and load_sample('[{"a": 1}]') == [{"a": 1}]


def test_huge_malformed_rows_keep_their_sample_through_audit_and_rebase(
    make_lakehouse, tmp_path: Path
) -> None:
    lh = make_lakehouse("demo.wide:\n  checks:\n    - not_null: [name]\n")
    r = ingest(lh, T, [write_csv(tmp_path / "seed.csv", HEADER, [(1, "ann", 30)])], create=True)
    publish(lh, T, r.branch)
    src = tmp_path / "huge.csv"
    src.write_text(
        "id,name,age\n"
        "2,bob,40\n"
        f"3,{BIG}\n"  # ragged: two fields, one of them 50 kB
        f"4,cy,{BIG}\n"  # a 50 kB value that is no int
        f"5,dee,41,{BIG}\n"  # ragged: an extra 50 kB field
        "6,eve,42\n"
    )
    r = ingest(lh, T, [str(src)], branch="huge")
    assert (r.malformed_rows, r.rows_written) == (3, 2)
    head = lineage(lh.table(T), "huge").new_snapshots[-1]
    stored = summary_get(head, "wap.malformed-sample")
    assert stored is not None and len(stored) <= BUDGET_CHARS
    assert len(json.loads(stored)) == 3  # valid JSON, every sampled row kept
    check = next(c for c in r.audit.checks if c.name == "malformed_rows")
    assert check.status == "failed" and check.failing_rows == 3
    assert sorted(s["__line"] for s in check.sample) == [3, 4, 5]
    assert all(len(str(v)) <= 201 for s in check.sample for v in s.values())

    # main moves; the branch is rebased with its sample (this crashed on the cut JSON before)
    other = ingest(lh, T, [write_csv(tmp_path / "other.csv", HEADER, [(7, "fay", 43)])], branch="other")
    publish(lh, T, other.branch)
    rb = rebase(lh, T, "huge")
    assert rb.outcome == "rebased" and rb.rows == 2
    again = run_audit(lh, T, "huge")
    check = next(c for c in again.checks if c.name == "malformed_rows")
    assert check.failing_rows == 3 and sorted(s["__line"] for s in check.sample) == [3, 4, 5]
