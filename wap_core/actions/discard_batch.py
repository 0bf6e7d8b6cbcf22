"""discard --batch: drop the branch of every table of a batch, all or none (mains untouched)."""

from __future__ import annotations

from wap_core.actions import discard
from wap_core.actions.spec import ActionSpec, CliCommand

# intents (one per table, one transaction) -> every table's new metadata file written -> the pointer swap
# (inside the database transaction, then committed) -> the outcome rows (one transaction)
FAULTS = (
    "after_discard_batch_intents",
    "after_discard_batch_write",
    "in_discard_batch_transaction",
    "after_discard_batch_commit",
    "before_discard_batch_outcome",
)

ACTION = ActionSpec(
    name="discard_batch",
    word="discard",  # each table's branch removal is a discard: the same intent word and judge, per table
    outcomes=("discarded",),
    permission=discard.DISCARD,
    moves_ref=True,
    faults=FAULTS,
    pauses=("after_discard_batch_intents",),  # the race test holds it after its intents
    events=(discard.DISCARDED,),
    function="discard_batch",
    cli=CliCommand(("discard", "--batch")),
)
