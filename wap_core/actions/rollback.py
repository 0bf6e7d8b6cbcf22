"""rollback: move main back to a snapshot in its own history (admin)."""

from __future__ import annotations

from wap_core.actions import common
from wap_core.actions.spec import JSON, OPTIONAL_TABLE, ActionSpec, CliCommand, EventSpec, arg

ROLLED_BACK = EventSpec("rolled_back", "Rolled back", ":rewind:")

ACTION = ActionSpec(
    name="rollback",
    word="rollback",
    outcomes=("rolled_back",),
    permission=common.ADMIN,
    moves_ref=True,
    faults=("after_rollback_intent", "after_rollback_commit"),  # intent -> main moved back -> outcome
    events=(ROLLED_BACK,),
    function="rollback",
    cli=CliCommand(
        ("rollback",),
        "move main back to a snapshot in its own history (admin role)",
        (
            OPTIONAL_TABLE,
            arg("--to", type=int, metavar="SNAPSHOT_ID", help="the snapshot to move TABLE's main back to"),
            arg(
                "--batch",
                help="move every table of this published batch back to its main before the batch's publish,"
                " all or none (instead of TABLE --to)",
            ),
            arg("--reason", required=True),
            JSON,
        ),
    ),
)
