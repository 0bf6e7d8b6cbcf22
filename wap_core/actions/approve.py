"""approve: approve a branch's current head (approver)."""

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
        (
            OPTIONAL_TABLE,
            OPTIONAL_BRANCH,
            arg(
                "--batch",
                help="approve every table of the open batch of this name at once (instead of TABLE BRANCH),"
                " bound to its tables' heads",
            ),
            arg("--comment"),
            JSON,
        ),
    ),
)
