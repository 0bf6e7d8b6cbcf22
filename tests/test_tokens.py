"""Issue 19 item 9: the CLI's identity. Service tokens (``token create|list|revoke``, admin only, stored
hashed in the catalog's database, passed as WAP_TOKEN) and the access file's ``cli_identity: token``,
which refuses the bare environment name (WAP_USER / the OS user). Both modes, on the real CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers import cli_process, lake_env, run_cli, write_csv

from wap_core import Lakehouse, TableId
from wap_core.exceptions import AccessFileError
from wap_core.security.access import AccessPolicy, Role, parse_access
from wap_core.store.migrate import HEAD
from wap_core.workflow.ingest import ingest

ACCESS = """\
roles:
  viewer: ["*"]
  steward: [sam]
  admin: [root]
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "access.yml").write_text(ACCESS)
    for k in list(os.environ):
        if k.startswith("WAP_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("WAP_HOME", str(home))
    monkeypatch.setenv("WAP_CATALOG_NAME", "tok")
    monkeypatch.setenv("WAP_ACCESS", str(home / "access.yml"))
    return home


def cli(user: str | None, *args: str, token: str | None = None) -> tuple[int, str, str]:
    """The CLI in-process as ``user`` (WAP_USER unset when None) with ``token`` (WAP_TOKEN), in ``home``'s settings."""
    env = {k: v for k, v in (("WAP_USER", user), ("WAP_TOKEN", token)) if v is not None}
    return run_cli(env, *args, unset=("WAP_USER", "WAP_TOKEN"))


def whoami(user: str | None, token: str | None = None) -> dict[str, object]:
    code, out, err = cli(user, "whoami", "--json", token=token)
    assert code == 0, err
    return dict(json.loads(out))


def journal(home: Path) -> list[dict[str, object]]:
    engine = sa.create_engine(f"sqlite:///{home / 'catalog.db'}")
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(sa.text("select * from wap_journal order by id")).mappings()]
    engine.dispose()
    return rows


def create(user: str, *args: str) -> tuple[str, dict[str, object]]:
    code, out, err = cli(user, "token", "create", *args, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert "shown once" in err and d["token"] not in err
    return str(d["token"]), d


def test_tokens_are_admin_only_stored_hashed_and_act_as_their_user_with_their_role(home: Path) -> None:
    # only an admin creates tokens
    code, out, err = cli("sam", "token", "create", "--user", "ci-bot", "--role", "steward")
    assert (code, out, err) == (1, "", "error: sam (steward) may not create token: admin role needed\n")
    token, made = create("root", "--user", "ci-bot", "--role", "steward", "--expires", "30d")
    assert token.startswith("wapt_") and len(token) == 48
    assert (made["user"], made["role"], made["status"], made["created_by"]) == (
        "ci-bot",
        "steward",
        "active",
        "root",
    )
    # stored hashed: the database holds its SHA-256, never the token
    engine = sa.create_engine(f"sqlite:///{home / 'catalog.db'}")
    with engine.connect() as conn:
        stored = conn.execute(sa.text("select token_hash, user_name, role from wap_tokens")).all()
        version = conn.execute(sa.text("select version_num from wap_alembic_version")).scalar_one()
    engine.dispose()
    assert stored == [(hashlib.sha256(token.encode()).hexdigest(), "ci-bot", "steward")] and version == HEAD
    assert token.encode() not in (home / "catalog.db").read_bytes()
    # the token acts as its user with exactly its role, whatever WAP_USER says
    assert whoami("root", token) == {"user": "ci-bot", "roles": ["viewer", "steward"]}
    code, _, err = cli("root", "token", "list", token=token)
    assert (code, err) == (1, "error: ci-bot (steward) may not list tokens: admin role needed\n")
    code, out, err = cli(None, "token", "list", "--json", token=token.replace("wapt_", "wapt_x")[:48])
    assert (code, out) == (1, "") and err == "error: WAP_TOKEN is not a valid service token\n"
    # list (never the token) and the journal: created, refused, never the token itself
    code, out, err = cli("root", "token", "list", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [(t["id"], t["user"], t["role"], t["status"]) for t in listed] == [
        (made["id"], "ci-bot", "steward", "active")
    ]
    assert "token" not in listed[0] and token not in out
    rows = journal(home)
    assert ("root", "create_token", "created") in [(r["user_name"], r["action"], r["outcome"]) for r in rows]
    assert ("ci-bot", "list_tokens", "refused") in [(r["user_name"], r["action"], r["outcome"]) for r in rows]
    assert (None, "authenticate", "refused") in [(None, r["action"], r["outcome"]) for r in rows]
    assert not any(token in json.dumps(r, default=str) for r in rows)


def test_only_an_admin_revokes_a_token(home: Path) -> None:
    _, made = create("root", "--user", "ci-bot", "--role", "steward")
    code, out, err = cli("sam", "token", "revoke", str(made["id"]))
    assert (code, out, err) == (1, "", "error: sam (steward) may not revoke token: admin role needed\n")
    code, out, err = cli("root", "token", "list", "--json")
    assert code == 0 and [t["status"] for t in json.loads(out)] == ["active"], err


def test_expired_and_revoked_tokens_are_refused_and_journaled(home: Path) -> None:
    short, _ = create("root", "--user", "ci-bot", "--role", "approver", "--expires", "1s")
    long, made = create("root", "--user", "etl", "--role", "steward")
    assert whoami(None, long)["user"] == "etl"
    time.sleep(1.2)
    code, out, err = cli("root", "whoami", token=short)
    assert (
        (code, out) == (1, "") and err.startswith("error: service token ") and "(ci-bot) expired at " in err
    )
    code, out, err = cli("root", "token", "revoke", str(made["id"]), "--json")
    assert code == 0 and json.loads(out)["status"] == "revoked", err
    code, out, err = cli("root", "whoami", token=long)
    assert (
        code == 1
        and f"service token {made['id']} (etl) was revoked at " in err
        and err.endswith(" by root\n")
    )
    assert cli("root", "token", "revoke", "999")[0] == 2  # no such token
    codes = [
        (r["user_name"], r["action"], r["outcome"], json.loads(str(r["details"])).get("code"))
        for r in journal(home)
    ]
    assert ("ci-bot", "authenticate", "refused", "token_expired") in codes
    assert ("etl", "authenticate", "refused", "token_revoked") in codes
    assert ("root", "revoke_token", "revoked", None) in codes
    for bad in (["--expires", "0s"], ["--expires", "400d"], ["--expires", "soon"], ["--role", "boss"]):
        args = ["--user", "x", "--role", "viewer", *bad] if bad[0] == "--expires" else ["--user", "x", *bad]
        assert cli("root", "token", "create", *args)[0] == 2, bad


def test_cli_identity_token_refuses_the_bare_environment_name(home: Path) -> None:
    # switch off (default): the environment name is accepted
    assert whoami("root") == {"user": "root", "roles": ["viewer", "steward", "approver", "admin"]}
    token, _ = create("root", "--user", "ci-bot", "--role", "steward")
    (home / "access.yml").write_text(ACCESS + "cli_identity: token\n")
    code, out, err = cli("root", "whoami", "--json")
    assert (code, out) == (1, "")
    assert err == (
        f"error: the access file {home / 'access.yml'} sets cli_identity: token: the CLI needs a service token "
        "in WAP_TOKEN; the environment name 'root' (WAP_USER / the OS user) is not accepted\n"
    )
    assert cli(None, "token", "list")[0] == 1  # the OS user is refused too
    e = journal(home)[-1]
    assert (e["user_name"], e["action"], e["outcome"]) == ("root", "authenticate", "refused")
    assert json.loads(str(e["details"])) == {"code": "token_required"}
    # a valid token is the way in
    assert whoami("root", token) == {"user": "ci-bot", "roles": ["viewer", "steward"]}
    # an admin's token can manage tokens in this mode
    (home / "access.yml").write_text(ACCESS)
    admin_token, _ = create("root", "--user", "ops-bot", "--role", "admin", "--expires", "1d")
    (home / "access.yml").write_text(ACCESS + "cli_identity: token\n")
    code, out, err = cli("mallory", "token", "list", "--json", token=admin_token)
    assert code == 0 and [t["user"] for t in json.loads(out)] == ["ci-bot", "ops-bot"], err


def test_cli_identity_must_be_env_or_token() -> None:
    assert parse_access(ACCESS, "a.yml").cli_identity == "env"
    assert parse_access(ACCESS + "cli_identity: token\n", "a.yml").cli_identity == "token"
    with pytest.raises(AccessFileError) as info:
        parse_access(ACCESS + "cli_identity: tokens\n", "a.yml")
    assert str(info.value) == (
        "a.yml:5: 'cli_identity' must be 'env' (WAP_USER / the OS user) or 'token' (WAP_TOKEN only), got 'tokens'"
    )


def test_the_token_never_reaches_the_logs_of_a_cli_run(home: Path) -> None:
    token, _ = create("root", "--user", "ci-bot", "--role", "viewer")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WAP_")}}
    env.update({"WAP_HOME": str(home), "WAP_CATALOG_NAME": "tok", "WAP_ACCESS": str(home / "access.yml")})
    env["WAP_TOKEN"] = token
    p = cli_process(env, "--debug", "token", "list")
    assert p.returncode == 1 and "ci-bot (viewer) may not list tokens" in p.stderr
    assert token not in p.stdout + p.stderr


# --------------------------------------------------------------------------- issue 25 item 5: role and record


def test_a_tokens_role_is_a_ceiling_no_wildcard_grant_raises(home: Path) -> None:
    """``steward: ["*"]`` makes every named user a steward, never a viewer token's user."""
    (home / "access.yml").write_text('roles:\n  viewer: ["*"]\n  steward: ["*"]\n  admin: [root]\n')
    token, _ = create("root", "--user", "ci-bot", "--role", "viewer")
    assert whoami("mallory", token) == {"user": "ci-bot", "roles": ["viewer"]}
    code, out, err = cli(None, "comment", "demo.people", "incoming", "looks fine", token=token)
    assert (code, out, err) == (1, "", "error: ci-bot (viewer) may not comment: steward role needed\n")
    e = journal(home)[-1]
    assert (e["user_name"], e["action"], e["outcome"]) == ("ci-bot", "comment", "refused")
    assert whoami("ci-bot") == {
        "user": "ci-bot",
        "roles": ["viewer", "steward"],
    }  # the name alone: the file's
    # nor does a line naming the token's user raise it, and a steward token is not lowered by "*": viewer
    (home / "access.yml").write_text('roles:\n  viewer: ["*"]\n  approver: [ci-bot]\n  admin: [root]\n')
    assert whoami(None, token)["roles"] == ["viewer"]
    steward, _ = create("root", "--user", "etl", "--role", "steward")
    assert whoami(None, steward)["roles"] == ["viewer", "steward"]
    # with no access file (everyone is admin) a token still holds exactly its role
    off = AccessPolicy.off("none.yml").with_token("ci-bot", Role.VIEWER)
    assert (off.role_of("ci-bot"), off.role_of("CI-bot"), off.role_of("root")) == (
        Role.VIEWER,
        Role.ADMIN,
        Role.ADMIN,
    )


def test_the_journal_says_which_token_was_created_revoked_and_refused(home: Path) -> None:
    """Ids and users of tokens stay readable in the journal (only secrets are masked)."""
    token, made = create("root", "--user", "ci-bot", "--role", "steward")
    assert cli("root", "token", "revoke", str(made["id"]))[0] == 0
    assert cli(None, "whoami", token=token)[0] == 1
    rows = [
        (r["user_name"], r["action"], r["reason"], json.loads(str(r["details"])))
        for r in journal(home)
        if r["action"] in ("create_token", "revoke_token", "authenticate")
    ]
    tid = made["id"]
    assert rows[0][:2] == ("root", "create_token") and rows[0][3] == {
        "token_id": tid,
        "token_user": "ci-bot",
        "role": "steward",
    }
    assert rows[0][2].startswith(f"service token {tid} for ci-bot (steward), expires ")
    assert rows[1] == ("root", "revoke_token", f"service token {tid} revoked", {"token_id": tid})
    assert rows[2][:2] == ("ci-bot", "authenticate")
    assert rows[2][3] == {"code": "token_revoked", "token_id": tid}
    assert not any(token in json.dumps(r, default=str) for r in journal(home))


def test_a_forged_token_is_journaled_as_unauthenticated(home: Path) -> None:
    """The ``WAP_USER`` a token would have overridden proves nothing: the refusal is nobody's."""
    forged = "wapt_" + "A" * 43
    code, out, err = cli("root", "whoami", token=forged)
    assert (code, out, err) == (1, "", "error: WAP_TOKEN is not a valid service token\n")
    e = journal(home)[-1]
    assert (e["user_name"], e["action"], e["outcome"]) == ("unauthenticated", "authenticate", "refused")
    assert e["reason"] == "WAP_TOKEN is not a valid service token"
    assert json.loads(str(e["details"])) == {"code": "invalid_token", "environment_user": "root"}
    assert forged not in json.dumps(e, default=str)


def test_a_token_pasted_into_a_comment_or_a_reason_is_never_stored(make_lakehouse, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A token in user text (a comment, a review's comment, a discard's reason) is masked by its format
    before it is stored, whoever's it is: this process never saw it (made by another process)."""
    lh: Lakehouse = make_lakehouse("demo.people:\n  checks:\n    - not_null: [name]\n", user="root")
    (lh.settings.home / "access.yml").write_text(ACCESS)
    t = TableId("demo", "people")
    ingest(lh, t, [write_csv(tmp_path / "p.csv", ["id", "name"], [(1, "ann")])], create=True, branch="b1")
    env = lake_env(lh.settings, "root")
    base = {k: v for k, v in os.environ.items() if not k.startswith("WAP_")}
    made = cli_process({**base, **env}, "token", "create", "--user", "ci-bot", "--role", "steward", "--json")
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    for args in (
        ("comment", "demo.people", "b1", f"use {token} for the job"),
        ("comment", "demo.people", "b1", "the check", "--check", f"x{token[:30]}"),  # cut short, run on
        ("request-changes", "demo.people", "b1", "--comment", f"WAP_TOKEN={token}"),
        ("discard", "demo.people", "b1", "--reason", f"pasted {token}, sorry"),
    ):
        code, _, err = run_cli(env, *args)
        assert code == 0, (args, err)
    code, out, err = run_cli(env, "comments", "demo.people", "b1", "--json")
    assert code == 0, err
    thread = [(c["kind"], c["check"], c["text"]) for c in json.loads(out)]
    assert thread == [
        ("comment", None, "use *** for the job"),
        ("comment", "x***", "the check"),
        ("changes_requested", None, "WAP_TOKEN=***"),
    ]
    (discarded,) = lh.journal.history("demo.people", action="discard")
    assert discarded.reason == "pasted ***, sorry"
    stored: list[str] = []
    with lh.journal.engine.connect() as conn:
        for name in ("wap_comments", "wap_reviews", "wap_journal", "wap_intents"):
            stored += [
                json.dumps(dict(r), default=str)
                for r in conn.execute(sa.text(f"select * from {name}")).mappings()
            ]
    assert stored and not [row for row in stored if token[:21] in row]
