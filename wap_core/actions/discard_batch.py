"""discard --batch: drop the branch of every table of a batch (mains untouched)."""

from __future__ import annotations

from wap_core.actions import discard
from wap_core.actions.spec import ActionSpec, CliCommand

ACTION = ActionSpec(
    name="discard_batch",
    word="discard",  # each table's branch is discarded as by a discard: the same intent, judge and points
    outcomes=("discarded",),
    permission=discard.DISCARD,
    moves_ref=True,
    faults=discard.ACTION.faults,
    events=(discard.DISCARDED,),
    function="discard_batch",
    cli=CliCommand(("discard", "--batch")),
)
