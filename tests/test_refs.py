"""Ref moves in one place (wap_core.lake.refs): both engines' commit conflicts map to one typed exception;
one retry policy; branch removal. Real Spark and a real catalog; the races are real stale commits."""

from __future__ import annotations

import pytest
from helpers import refs

from wap_core import Lakehouse, TableId
from wap_core.exceptions import CommitConflictError, ConflictError
from wap_core.identifiers import MAIN
from wap_core.lake.refs import (
    RETRY,
    commit_conflicts,
    commit_with_retry,
    is_commit_conflict,
    remove_branch,
    with_commit_retry,
)

T = TableId("demo", "refs")


@pytest.fixture
def lh(make_lakehouse) -> Lakehouse:  # type: ignore[no-untyped-def]
    lh: Lakehouse = make_lakehouse(name="refs")
    spark = lh.spark
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{lh.settings.catalog_name}`.`demo`")
    spark.sql(f"CREATE TABLE {lh.sql_name(T)} (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {lh.sql_name(T)} VALUES (1)")
    return lh


def test_a_stale_pyiceberg_commit_is_one_typed_conflict(lh: Lakehouse) -> None:
    stale = lh.table(T)
    head = refs(lh, T)[MAIN]
    lh.table(T).manage_snapshots().create_branch(head, "other").commit()  # someone else commits first
    with pytest.raises(CommitConflictError) as info, commit_conflicts():
        stale.manage_snapshots().create_branch(head, "other").create_branch(head, "mine").commit()
    assert isinstance(info.value, ConflictError) and info.value.exit_code == 1
    assert info.value.reason_code == "conflict"
    assert "mine" not in refs(lh, T)  # nothing of the lost commit was applied


def test_a_spark_validation_conflict_through_py4j_is_the_same_typed_conflict(lh: Lakehouse) -> None:
    spark, name = lh.spark, lh.sql_name(T)
    lh.table(T).manage_snapshots().create_branch(refs(lh, T)[MAIN], "b").commit()
    spark.sql(f"INSERT INTO {name} VALUES (2)")  # main and b diverge
    spark.sql(f"INSERT INTO {lh.sql_name(T, 'b')} VALUES (3)")
    call = f"CALL `{lh.settings.catalog_name}`.system.fast_forward('demo.refs', 'main', 'b')"
    with pytest.raises(Exception) as raw:
        spark.sql(call)
    assert is_commit_conflict(raw.value), str(raw.value)[:300]
    with pytest.raises(CommitConflictError, match="Cannot fast-forward"), commit_conflicts():
        spark.sql(call)


def test_other_errors_pass_through_unchanged(lh: Lakehouse) -> None:
    with pytest.raises(ZeroDivisionError), commit_conflicts():
        _ = 1 / 0
    with pytest.raises(Exception) as info, commit_conflicts():
        lh.spark.sql("SELECT * FROM no_such_table_anywhere").collect()
    assert not isinstance(info.value, CommitConflictError)


def test_commit_with_retry_retries_a_lost_race_on_fresh_metadata(lh: Lakehouse) -> None:
    first = refs(lh, T)[MAIN]
    stale = lh.table(T)  # main at ``first``
    lh.spark.sql(f"INSERT INTO {lh.sql_name(T)} VALUES (2)")  # main moves under us
    tried: list[int] = []

    def move(t):  # type: ignore[no-untyped-def]  # requires main where ``t`` saw it
        tried.append(1)
        t.manage_snapshots().create_branch(first, MAIN).commit()

    commit_with_retry(
        lh.catalog, T, move, tbl=stale
    )  # the stale attempt loses, the retry on fresh metadata lands
    assert len(tried) == 2 and refs(lh, T)[MAIN] == first
    # a precondition that broke stops the retries at once
    stale, tried[:] = lh.table(T), []
    lh.table(T).manage_snapshots().create_branch(first, "another").commit()

    def move2(t):  # type: ignore[no-untyped-def]
        tried.append(1)
        t.manage_snapshots().create_branch(first, "another").commit()

    with pytest.raises(CommitConflictError):
        commit_with_retry(
            lh.catalog, T, move2, retry_if=lambda t: "another" not in t.metadata.refs, tbl=stale
        )
    assert len(tried) == 1


def test_with_commit_retry_gives_up_after_the_policy_attempts() -> None:
    from pyiceberg.exceptions import CommitFailedException

    calls: list[int] = []

    def always_loses() -> None:
        calls.append(1)
        raise CommitFailedException("Requirement failed: branch main has changed")

    with pytest.raises(CommitConflictError, match="branch main has changed"):
        with_commit_retry(always_loses, policy=type(RETRY)(attempts=3, first_delay=0.001))
    assert len(calls) == 3
    assert (
        RETRY.attempts == 5 and 0.07 <= RETRY.delay(0) <= 0.13 and RETRY.delay(10) <= RETRY.max_delay * 1.25
    )


def test_remove_branch_only_while_at_the_expected_head(lh: Lakehouse) -> None:
    head = refs(lh, T)[MAIN]
    lh.table(T).manage_snapshots().create_branch(head, "gone").commit()
    assert remove_branch(lh.catalog, T, "gone", head=head + 1) is False  # moved: not ours to remove
    assert "gone" in refs(lh, T)
    assert remove_branch(lh.catalog, T, "gone", head=head) is True
    assert "gone" not in refs(lh, T)
    assert remove_branch(lh.catalog, T, "gone") is False  # already gone
