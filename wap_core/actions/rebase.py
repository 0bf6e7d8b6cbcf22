"""rebase: replay a branch's rows onto current main, or every table's of a batch, all or none (temporary
branches, then one swap): one path, a branch being a batch of one (:mod:`wap_core.workflow.rebase`)."""

from __future__ import annotations

from wap_core.actions.spec import (
    JSON,
    OPTIONAL_BRANCH,
    OPTIONAL_TABLE,
    ActionSpec,
    CliCommand,
    PermissionSpec,
    arg,
)

REBASE = PermissionSpec("rebase", "steward", "rebase", "rebase")

ACTION = ActionSpec(
    name="rebase",
    word="rebase",
    outcomes=("rebased",),
    permission=REBASE,
    moves_ref=True,
    # intents (one per table, one transaction) -> temp branches at each main -> the replayed batches appended
    # (Spark) and every table's new metadata file written -> the swap (inside the database transaction, then
    # committed) -> the outcome rows (one transaction)
    faults=(
        "after_rebase_batch_intents",
        "after_rebase_batch_temp_branches",
        "after_rebase_batch_write",
        "in_rebase_batch_transaction",
        "after_rebase_batch_commit",
        "before_rebase_batch_outcome",
    ),
    pauses=("after_rebase_batch_intents",),  # the race test holds a rebase after its intents
    function="rebase",
    cli=CliCommand(
        ("rebase",),
        "replay a branch onto current main",
        (
            OPTIONAL_TABLE,
            OPTIONAL_BRANCH,
            arg(
                "--batch",
                help="rebase every table's branch of this batch, all or none (instead of TABLE BRANCH)",
            ),
            JSON,
        ),
    ),
)
