"""rollback --batch: move every table of a published batch back to its main before that publish, all or none."""

from __future__ import annotations

from wap_core.actions import rollback
from wap_core.actions.spec import ActionSpec, CliCommand

# intents (one per table, one transaction) -> every table's new metadata file written -> the pointer swap
# (inside the database transaction, then committed) -> the outcome rows (one transaction)
FAULTS = (
    "after_rollback_batch_intents",
    "after_rollback_batch_write",
    "in_rollback_batch_transaction",
    "after_rollback_batch_commit",
    "before_rollback_batch_outcome",
)

ACTION = ActionSpec(
    name="rollback_batch",
    word="rollback",  # each table's main move is a rollback: the same intent word and judge, per table
    outcomes=("rolled_back",),
    permission=rollback.ACTION.permission,  # admin, on every table of the batch
    moves_ref=True,
    faults=FAULTS,
    pauses=("after_rollback_batch_intents",),  # the race test holds it after its intents
    events=rollback.ACTION.events,
    function="rollback_batch",
    cli=CliCommand(("rollback", "--batch")),
)
