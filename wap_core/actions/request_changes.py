"""request changes: ask for changes on a branch's current head (approver), with a comment."""

from __future__ import annotations

from wap_core.actions import approve
from wap_core.actions.spec import (
    JSON,
    OPTIONAL_BRANCH,
    OPTIONAL_TABLE,
    ActionSpec,
    CliCommand,
    EventSpec,
    arg,
)

CHANGES_REQUESTED = EventSpec("changes_requested", "Changes requested", ":memo:")

ACTION = ActionSpec(
    name="request_changes",
    word="request_changes",
    outcomes=("changes_requested",),
    permission=approve.APPROVE,
    no_ref="a review is a row of the branch's thread and the journal; it moves no ref",
    events=(CHANGES_REQUESTED,),
    function="request_changes",
    cli=CliCommand(
        ("request-changes",),
        "request changes on a branch's current head (approver role)",
        (
            OPTIONAL_TABLE,
            OPTIONAL_BRANCH,
            arg(
                "--batch",
                help="request changes on every table of the open batch of this name at once"
                " (instead of TABLE BRANCH)",
            ),
            arg("--comment", required=True),
            JSON,
        ),
    ),
)
