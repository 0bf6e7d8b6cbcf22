"""States as enums and the typed diff results: pure Python, no Spark."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass

import pytest

from wap_core.analysis.diff import ColumnDiff, DiffResult, ProfileBasis, SchemaChange, rank_changes
from wap_core.lake.catalog import MetadataDiff
from wap_core.lake.profile import ColumnProfile, ProfileSample, TableProfile, TopValue
from wap_core.states import Action, BranchStatus, CheckStatus, Outcome, branch_status, overall_status
from wap_core.values import to_jsonable


@dataclass(frozen=True)
class _Audit:
    snapshot_id: int | None
    status: CheckStatus


def test_check_status_decides_failed_or_error_once() -> None:
    assert [s.value for s in CheckStatus if s.blocks_publish] == ["failed", "error"]
    assert [s.value for s in sorted(CheckStatus, key=lambda s: s.rank)] == [
        "error",
        "failed",
        "warned",
        "passed",
    ]
    assert overall_status(["passed", "warned"]) is CheckStatus.WARNED
    assert overall_status([CheckStatus.PASSED, CheckStatus.ERROR]) is CheckStatus.FAILED
    assert overall_status([]) is CheckStatus.PASSED


def test_states_read_and_write_as_their_strings() -> None:
    s = CheckStatus.FAILED
    assert s == "failed" and str(s) == "failed" and f"{s}" == "failed" and s.upper() == "FAILED"
    assert (
        json.dumps({"status": s, "b": BranchStatus.NOT_AUDITED}) == '{"status": "failed", "b": "not_audited"}'
    )
    assert {"failed": 1}[s] == 1 and pickle.loads(pickle.dumps(s)) is s


def test_branch_status_is_decided_in_one_place() -> None:
    passed, failed = _Audit(7, CheckStatus.PASSED), _Audit(7, CheckStatus.FAILED)
    assert branch_status(7, None) is BranchStatus.NOT_AUDITED
    assert branch_status(8, passed) is BranchStatus.STALE
    assert branch_status(7, passed) is BranchStatus.PASSED
    assert branch_status(7, _Audit(7, CheckStatus.WARNED)) is BranchStatus.WARNED
    assert branch_status(7, failed) is BranchStatus.FAILED
    assert branch_status(7, None, incomplete=True) is BranchStatus.INCOMPLETE
    assert branch_status(8, passed, incomplete=True) is BranchStatus.INCOMPLETE
    assert (
        branch_status(7, passed, incomplete=True) is BranchStatus.PASSED
    )  # an audit of the head outranks it
    assert [s.value for s in BranchStatus if s.publishable] == ["passed", "warned"]
    assert {s.value for s in BranchStatus if s.needs_audit} == {"not_audited", "stale"}


def test_journal_words_written_elsewhere_are_still_read() -> None:
    assert Action("publish") is Action.PUBLISH and Outcome("rolled_back") is Outcome.ROLLED_BACK
    future = Action("replicate")  # a row written by a newer version
    assert isinstance(future, Action) and future == "replicate" and str(future) == "replicate"
    assert not future.moves_ref and Action.REOPEN.moves_ref and not Action.AUDIT.moves_ref
    assert Outcome("postponed").value == "postponed"
    with pytest.raises(ValueError):
        CheckStatus("maybe")  # a check's status is never guessed


STORED_COLUMN = {  # a column of a profile as wap_profiles stores it (with its sketch)
    "type": "bigint",
    "kind": "numeric",
    "rows": 10,
    "nulls": 1,
    "null_pct": 10.0,
    "distinct": 9,
    "hll": "AgEH",
    "min": 1,
    "max": 9,
    "mean": 5.0,
    "quantiles": {"0.0": 1.0, "0.5": 5.0, "1.0": 9.0},
    "top_values": None,
    "accuracy": {
        "rows": "exact",
        "nulls": "exact",
        "null_pct": "exact",
        "distinct": "approximate",
        "min": "exact",
        "max": "exact",
        "mean": "exact",
        "quantiles": "approximate",
        "top_values": "exact",
    },
    "approximate": ["distinct", "quantiles"],
}


def test_column_profile_reads_stored_json_and_writes_it_without_the_sketch() -> None:
    col = ColumnProfile.from_json(STORED_COLUMN)
    assert to_jsonable(col) == {k: v for k, v in STORED_COLUMN.items() if k != "hll"}
    assert col.nulls == 1 and col["nulls"] == 1 and "hll" not in col and col.get("hll") is None
    old = {k: v for k, v in STORED_COLUMN.items() if k not in ("accuracy", "approximate")}
    assert ColumnProfile.from_json(old).approximate == ("distinct", "quantiles")  # cached before the markers
    top = ColumnProfile.from_json({**STORED_COLUMN, "top_values": [{"value": "a", "count": 3, "pct": 30.0}]})
    assert top.top_values is not None and top.top_values[0].count == 3
    assert to_jsonable(top)["top_values"] == [{"value": "a", "count": 3, "pct": 30.0}]


def _diff() -> DiffResult:
    meta = MetadataDiff("demo.t", "b", 1, 3, 1, False, 2, 10, 0, 2, 0, 100, 0, True, ("append", "append"))
    batch = ColumnProfile.from_json({**STORED_COLUMN, "null_pct": 20.0, "mean": 6.0})
    main = ColumnProfile.from_json(STORED_COLUMN)
    cols = (ColumnDiff.of("id", main, batch), ColumnDiff.of("new", None, batch))
    basis = ProfileBasis("metadata", "manifests and a sample", ProfileSample(5, 1, 2))
    return DiffResult(meta, 10, 0, (SchemaChange("new", "added", None, "bigint"),), cols, basis)


def test_diff_result_holds_its_metadata_diff_and_writes_the_cli_json() -> None:
    d = _diff()
    out = to_jsonable(d)
    assert list(out) == [
        "table",
        "branch",
        "fork_snapshot_id",
        "head_snapshot_id",
        "main_snapshot_id",
        "main_moved",
        "pure_append",
        "rows_added",
        "rows_deleted",
        "schema_changes",
        "columns",
        "null_overlaps",
        "metadata",
        "main_profile",
    ]
    assert (out["table"], out["fork_snapshot_id"], out["pure_append"]) == ("demo.t", 1, True)
    assert (
        out["metadata"]["operations"] == ["append", "append"] and out["main_profile"]["sample"]["rows"] == 5
    )
    changed, added = out["columns"]
    assert changed["null_pct_change"] == 10.0 and changed["mean_change"] == 1.0
    assert "null_pct_change" not in added and "mean_change" not in added and added["main"] is None
    assert "hll" not in changed["main"]
    json.dumps(out)
    again = DiffResult.from_dict(json.loads(json.dumps(out)))
    assert json.dumps(to_jsonable(again)) == json.dumps(out) and again.metadata == d.metadata
    assert pickle.loads(pickle.dumps(d)) == d  # what st.cache_data stores
    assert d.column("id") is d.columns[0] and d.columns[0]["batch"]["nulls"] == 1
    assert to_jsonable(DiffResult(d.metadata, 0, 0, (), ()))["main_profile"] == {}


def test_rank_changes_reads_typed_columns_and_their_json() -> None:
    d = _diff()
    typed = rank_changes(d.columns)
    assert typed == rank_changes([to_jsonable(c) for c in d.columns])
    assert typed[0].column == "id" and typed[0].aspect == "null_rate"


def test_stored_profile_json_reads_back_and_writes_byte_for_byte() -> None:
    top = {"value": "a", "count": 3, "pct": 30.0}
    stored = {  # a wap_profiles row of a metadata-first profile, as written before the typed profile
        "rows": 10,
        "columns": {
            "id": STORED_COLUMN,
            "grp": {**STORED_COLUMN, "kind": "categorical", "top_values": [top]},
        },
        "source": "metadata",
        "basis": "manifests and a sample",
        "sample": {"rows": 5, "files": 1, "files_total": 2},
    }
    prof = TableProfile.from_json(json.loads(json.dumps(stored)))
    assert json.dumps(prof.to_json()) == json.dumps(stored)
    assert prof.columns["id"].hll == "AgEH" and prof.sample == ProfileSample(5, 1, 2)
    assert prof.column("grp") is not None and prof.columns["grp"].top_values == (TopValue("a", 3, 30.0),)
    batch = {"rows": 2, "columns": {"id": STORED_COLUMN}}  # a wap_batch_profiles row: no source
    assert json.dumps(TableProfile.from_json(batch).to_json()) == json.dumps(batch)
