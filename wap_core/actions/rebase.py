"""rebase: replay a branch's rows onto current main (a temporary branch, then a swap)."""

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
    # intent -> temp branch at main -> replayed batch on it -> swap -> outcome
    faults=("after_rebase_intent", "after_rebase_temp_branch", "after_rebase_write", "after_rebase_swap"),
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
