"""rollback: move main back to a snapshot in its own history, or every table of a published batch back to its
main before that publish (admin): one path, one table being a batch of one (:func:`wap_core.workflow.rollback.move_mains_back`)."""

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
    # intents (one per table, one transaction) -> every table's new metadata file written -> the pointer swap
    # (inside the database transaction, then committed) -> the outcome rows (one transaction)
    faults=(
        "after_rollback_batch_intents",
        "after_rollback_batch_write",
        "in_rollback_batch_transaction",
        "after_rollback_batch_commit",
        "before_rollback_batch_outcome",
    ),
    pauses=("after_rollback_batch_intents",),  # the race test holds it after its intents
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
