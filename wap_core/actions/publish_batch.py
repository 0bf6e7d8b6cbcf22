"""publish --batch: fast-forward every table of a batch to its audited head, all tables or none."""

from __future__ import annotations

from wap_core.actions import publish
from wap_core.actions.spec import ActionSpec, CliCommand

# intents (one per table, one transaction) -> every table's new metadata file written -> the pointer swap
# (inside the database transaction, then committed) -> the outcome rows (one transaction)
FAULTS = (
    "after_publish_batch_intents",
    "after_publish_batch_write",
    "in_publish_batch_transaction",
    "after_publish_batch_commit",
    "before_publish_batch_outcome",
)

ACTION = ActionSpec(
    name="publish_batch",
    word="publish",  # each table's move is a publish: the same intent word and judge, per table
    outcomes=("published", "forced"),
    permission=publish.PUBLISH,  # on every table of the batch (force: FORCE_PUBLISH too)
    moves_ref=True,
    faults=FAULTS,
    # the race tests hold a batch between its precondition and its intents, or after its intents
    pauses=("before_publish_batch_intents", "after_publish_batch_intents"),
    events=(publish.PUBLISHED,),
    function="publish_batch",
    cli=CliCommand(("publish", "--batch")),
)
