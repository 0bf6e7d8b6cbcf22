"""rebase --batch: replay every table's branch of a batch onto its main, then swap them all in at once."""

from __future__ import annotations

from wap_core.actions import rebase
from wap_core.actions.spec import ActionSpec, CliCommand

# intents (one per table, one transaction) -> temp branches at each main -> the replayed batches appended
# (Spark) and every table's new metadata file written -> the swap (inside the database transaction, then
# committed) -> the outcome rows (one transaction)
FAULTS = (
    "after_rebase_batch_intents",
    "after_rebase_batch_temp_branches",
    "after_rebase_batch_write",
    "in_rebase_batch_transaction",
    "after_rebase_batch_commit",
    "before_rebase_batch_outcome",
)

ACTION = ActionSpec(
    name="rebase_batch",
    word="rebase",  # each table's swap is a rebase: the same intent word and judge, per table
    outcomes=("rebased",),
    permission=rebase.REBASE,  # on every table of the batch
    moves_ref=True,
    faults=FAULTS,
    pauses=("after_rebase_batch_intents",),  # the race test holds it after its intents
    function="rebase_batch",
    cli=CliCommand(("rebase", "--batch")),
)
