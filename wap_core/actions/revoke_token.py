"""token revoke: revoke a service token at once (admin)."""

from __future__ import annotations

from wap_core.actions import common
from wap_core.actions.spec import ActionSpec, CliCommand, arg

ACTION = ActionSpec(
    name="revoke_token",
    word="revoke_token",
    outcomes=("revoked",),
    permission=common.ADMIN,
    no_ref="a revocation marks a row of the journal database; it moves no ref",
    function="revoke_token",
    cli=CliCommand(
        ("token", "revoke"),
        "revoke a token at once",
        (arg("id", type=int, metavar="TOKEN_ID"), arg("--json", action="store_true")),
    ),
)
