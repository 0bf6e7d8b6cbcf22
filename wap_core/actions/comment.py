"""comment: add a comment to a branch's thread (steward)."""

from __future__ import annotations

from wap_core.actions.spec import BRANCH, JSON, TABLE, ActionSpec, CliCommand, PermissionSpec, arg

COMMENT = PermissionSpec("comment", "steward", "comment", "comment")

ACTION = ActionSpec(
    name="comment",
    word="comment",
    outcomes=(),  # a row of the thread; the journal sees a comment only when it is refused
    permission=COMMENT,
    no_ref="a comment is a row of the branch's thread; it moves no ref",
    function="add_comment",
    cli=CliCommand(
        ("comment",),
        "add a comment to a branch's thread (steward role)",
        (
            TABLE,
            BRANCH,
            arg("text", metavar="TEXT"),
            arg("--check", help="the check the comment is about"),
            JSON,
        ),
    ),
)
