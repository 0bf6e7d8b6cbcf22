"""reopen: make a rolled-back batch a branch again (steward: it is an ingest of that batch)."""

from __future__ import annotations

from wap_core.actions import ingest
from wap_core.actions.spec import JSON, TABLE, ActionSpec, CliCommand, arg

ACTION = ActionSpec(
    name="reopen",
    word="reopen",
    outcomes=("reopened",),
    permission=ingest.INGEST,
    moves_ref=True,
    faults=("after_reopen_intent", "after_reopen_commit"),  # intent -> branch created -> outcome
    function="reopen",
    cli=CliCommand(
        ("reopen",),
        "make a rolled-back batch a branch again (steward role)",
        (
            TABLE,
            arg("--snapshot", required=True, type=int, metavar="SNAPSHOT_ID"),
            arg("--branch"),
            arg(
                "--again",
                action="store_true",
                help="reopen a batch that is already open again as a branch (needs --reason)",
            ),
            arg("--reason", help="why (journaled); required with --again"),
            JSON,
        ),
    ),
)
