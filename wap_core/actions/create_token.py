"""token create: a service token for the CLI acting as a user with a role (admin; printed once)."""

from __future__ import annotations

from wap_core.actions import common
from wap_core.actions.spec import ActionSpec, CliCommand, arg

ACTION = ActionSpec(
    name="create_token",
    word="create_token",
    outcomes=("created",),
    permission=common.ADMIN,
    no_ref="a token is a row of the journal database; it moves no ref",
    function="create_token",
    cli=CliCommand(
        ("token", "create"),
        "a token acting as --user with --role; printed once (WAP_TOKEN)",
        (
            arg("--user", required=True, help="the user the token acts as, e.g. ci-bot"),
            arg("--role", required=True, choices=["viewer", "steward", "approver", "admin"]),
            arg("--expires", default="30d", metavar="DURATION", help="lifetime, e.g. 30d (default)"),
            arg("--json", action="store_true"),
        ),
    ),
)
