"""approve: approve a branch's current head (approver)."""

from __future__ import annotations

from wap_core.actions.spec import BRANCH, JSON, TABLE, ActionSpec, CliCommand, PermissionSpec, arg

APPROVE = PermissionSpec("approve", "approver", "approve", "approve")  # approve and request changes

ACTION = ActionSpec(
    name="approve",
    word="approve",
    outcomes=("approved",),
    permission=APPROVE,
    no_ref="a review is a row of the branch's thread and the journal; it moves no ref",
    function="approve",
    cli=CliCommand(
        ("approve",),
        "approve a branch's current head (approver role)",
        (TABLE, BRANCH, arg("--comment"), JSON),
    ),
)
