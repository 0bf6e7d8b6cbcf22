"""publish: fast-forward main to an audited branch, or every table of a batch, all or none (one multi-table
commit; the branches are removed): one path, a branch being a batch of one (:mod:`wap_core.workflow.publish`)."""

from __future__ import annotations

from wap_core.actions.spec import JSON, ActionSpec, CliCommand, EventSpec, PermissionSpec, arg

PUBLISH = PermissionSpec("publish", "approver", "publish", "publish")  # a branch whose audit passed
PUBLISHED = EventSpec("published", "Published", ":white_check_mark:")
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
    name="publish",
    word="publish",
    outcomes=("published",),  # a forced one: actions/force.py
    permission=PUBLISH,
    moves_ref=True,
    faults=FAULTS,
    # before_: the race tests hold the loser between its precondition and its intents (tests/test_races.py);
    # after_: the object-store tests stop the store before the commit (tests/test_s3_store.py), the gc tests
    # hold a batch's publish there
    pauses=("before_publish_batch_intents", "after_publish_batch_intents"),
    events=(PUBLISHED,),
    function="publish",
    closes_membership="published",
    cli=CliCommand(
        ("publish",),
        "fast-forward main to an audited branch",
        (
            arg("table", nargs="?"),
            arg("branch", nargs="?"),
            arg("--batch", help="publish every table of this batch, all or none (instead of TABLE BRANCH)"),
            arg("--force", action="store_true"),
            arg("--reason"),
            JSON,
        ),
    ),
)
