"""ingest: write sources into a new audit branch (the branch is created, the batch appended, then audited)."""

from __future__ import annotations

from wap_core.actions.spec import JSON, TABLE, ActionSpec, CliCommand, PermissionSpec, arg

INGEST = PermissionSpec("ingest", "steward", "ingest", "ingest")

ACTION = ActionSpec(
    name="ingest",
    word="ingest",
    outcomes=("written",),
    permission=INGEST,
    moves_ref=True,
    # intent -> CREATE BRANCH -> append the batch -> outcome; then, for ``--replay-of``, the mark of the kept
    # rows on the quarantine table (its own intent): its branch -> the marked rows committed -> outcome
    faults=(
        "after_ingest_intent",
        "after_create_branch",
        "after_ingest_commit",
        "after_replay_mark_branch",
        "after_replay_mark_write",
    ),
    # the object-store tests stop the store between the branch and its rows (tests/test_s3_store.py)
    pauses=("after_create_branch",),
    function="ingest",
    cli=CliCommand(
        ("ingest",),
        "write sources into a new audit branch and audit it",
        (
            TABLE,
            arg("sources", nargs="+", metavar="SOURCE"),
            arg("--branch"),
            arg(
                "--batch",
                help="add the table to the open batch of this name (created on first use): written,"
                " audited, reviewed and published with the batch's other tables",
            ),
            arg("--format", choices=["csv", "parquet", "json"]),
            arg(
                "--replay-of",
                metavar="BATCH",
                help="the sources replace the rows BATCH quarantined: they are marked replayed by this batch"
                " (in the quarantine table, on this batch's branch: published or discarded with it)",
            ),
            arg("--create", action="store_true", help="create the table from the source's schema if missing"),
            JSON,
        ),
    ),
)
