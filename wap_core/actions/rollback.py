"""rollback: move main back to a snapshot in its own history (admin)."""

from __future__ import annotations

from wap_core.actions import common
from wap_core.actions.spec import JSON, TABLE, ActionSpec, CliCommand, EventSpec, arg

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
            TABLE,
            arg("--to", required=True, type=int, metavar="SNAPSHOT_ID"),
            arg("--reason", required=True),
            JSON,
        ),
    ),
)
