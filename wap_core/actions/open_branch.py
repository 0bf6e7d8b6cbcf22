"""open: open a branch for a job's own Spark writes (created at main's head, or an existing one taken over).

The pipeline's identity becomes the batch's author; the result says how the job writes there
(``spark.wap.branch``, or the ``branch_<name>`` identifier).
"""

from __future__ import annotations

from wap_core.actions import ingest
from wap_core.actions.spec import JSON, TABLE, ActionSpec, CliCommand, arg

ACTION = ActionSpec(
    name="open",
    word="open",
    outcomes=("opened", "taken_over"),
    permission=ingest.INGEST,
    moves_ref=True,
    faults=("after_open_intent", "after_open_commit"),  # intent -> CREATE BRANCH at main's head -> outcome
    function="open_branch",
    cli=CliCommand(
        ("branch", "open"),
        "open a branch for your own Spark job to write (MERGE, UPDATE, DELETE, INSERT OVERWRITE, appends)",
        (
            TABLE,
            arg(
                "--branch",
                help="the branch's name (default job_<UTC time>); an existing branch is taken over",
            ),
            arg(
                "--batch",
                help="join the open batch of this name (created on first use): the branch is named like it",
            ),
            JSON,
        ),
    ),
)
