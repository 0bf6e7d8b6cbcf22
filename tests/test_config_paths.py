"""Issue 19 item 4: rules never fail open. A configured path (WAP_ACCESS, WAP_NOTIFY, WAP_INGEST_ROOTS)
that is not there is an error at start naming it — the CLI exits 2 with one line, the console shows one
line and stops; only an unset WAP_ACCESS with no default file means "access control off".

WAP_INGEST_ROOTS also takes object-store prefixes (``s3a://bucket/prefix``, issue 18): parsed next to
``:``-separated local paths, refused when malformed, probed at start (the real store: tests/test_s3_store.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from wap_core import Lakehouse, Settings, TableId
from wap_core.cli import main
from wap_core.config import parse_store_url
from wap_core.exceptions import (
    AccessFileError,
    NotifyFileError,
    PathNotAllowedError,
    SourceError,
    ValidationError,
)
from wap_core.security.access import access_policy
from wap_core.security.paths import (
    SourcePolicy,
    allowed_roots,
    describe_roots,
    fetch_url_sources,
    root_problem,
)
from wap_core.states import Outcome
from wap_core.workflow.ingest import ingest

ROOT = Path(__file__).resolve().parent.parent
ACCESS = "roles:\n  viewer: ['*']\n  admin: [root]\n"


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def _clean_env(mp: pytest.MonkeyPatch, home: Path, **extra: str) -> None:
    for k in list(os.environ):
        if k.startswith("WAP_"):
            mp.delenv(k)
    mp.setenv("WAP_HOME", str(home))
    mp.setenv("WAP_USER", "root")
    mp.setenv("WAP_CATALOG_NAME", "paths")
    for k, v in extra.items():
        mp.setenv(k, v)


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


# ----------------------------------------------------------------------------- the check itself
def test_configured_paths_must_exist_and_defaults_may_be_absent(tmp_path: Path) -> None:
    home = _home(tmp_path)
    Settings(home=home).check_configured_paths()  # nothing configured, nothing there: fine
    missing = tmp_path / "none.yml"
    with pytest.raises(AccessFileError) as info:
        Settings(home=home, access_path=missing).check_configured_paths()
    assert str(info.value) == (
        f"{missing}: the access file (WAP_ACCESS) does not exist; a configured access file never means "
        "'access control off' (unset WAP_ACCESS for that)"
    )
    with pytest.raises(AccessFileError, match="is not a regular file"):
        Settings(home=home, access_path=tmp_path).check_configured_paths()
    dangling = tmp_path / "link.yml"
    dangling.symlink_to(tmp_path / "gone.yml")
    with pytest.raises(AccessFileError, match="is a dangling symbolic link"):
        Settings(home=home, access_path=dangling).check_configured_paths()
    with pytest.raises(NotifyFileError) as ninfo:
        Settings(home=home, notify_path=tmp_path / "notify.yml").check_configured_paths()
    assert (
        str(ninfo.value) == f"{tmp_path / 'notify.yml'}: the notifications file (WAP_NOTIFY) does not exist"
    )
    land = tmp_path / "land"
    land.mkdir()
    with pytest.raises(ValidationError) as rinfo:
        Settings(home=home, ingest_roots=(land, tmp_path / "typo")).check_configured_paths()
    assert str(rinfo.value) == f"{tmp_path / 'typo'}: the ingest root (WAP_INGEST_ROOTS) does not exist"
    (tmp_path / "file.csv").write_text("a\n1\n")
    with pytest.raises(ValidationError, match="is not a folder"):
        Settings(home=home, ingest_roots=(tmp_path / "file.csv",)).check_configured_paths()
    # present: fine; the default landing folder is still created on first use
    (tmp_path / "access.yml").write_text(ACCESS)
    (tmp_path / "n.yml").write_text("webhooks: []\n")
    Settings(
        home=home, access_path=tmp_path / "access.yml", notify_path=tmp_path / "n.yml", ingest_roots=(land,)
    ).check_configured_paths()
    assert not (home / "landing").exists()
    assert (home / "landing").resolve() in allowed_roots(Settings(home=home))


def test_a_configured_access_file_that_disappears_is_an_error_not_access_off(tmp_path: Path) -> None:
    home = _home(tmp_path)
    path = tmp_path / "roles.yml"
    path.write_text(ACCESS)
    lh = Lakehouse(Settings(home=home, access_path=path, user="eve"))
    assert access_policy(lh.settings).enabled and access_policy(lh.settings).role_of("eve") is not None
    path.unlink()
    with pytest.raises(AccessFileError, match="is gone"):
        access_policy(lh.settings)  # never "everyone is admin"
    # the default file (WAP_ACCESS unset) may be deleted to turn access control off
    (home / "access.yml").write_text(ACCESS)
    default = Lakehouse(Settings(home=home, user="eve"))
    assert access_policy(default.settings).enabled
    (home / "access.yml").unlink()
    assert not access_policy(default.settings).enabled


# ----------------------------------------------------------------------------- the CLI
def test_cli_exits_2_naming_a_configured_path_that_is_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(tmp_path)
    missing = tmp_path / "none.yml"
    _clean_env(monkeypatch, home, WAP_ACCESS=str(missing))
    code, out, err = cli("whoami", "--json")
    assert (code, out) == (2, "")
    assert err == (
        f"error: {missing}: the access file (WAP_ACCESS) does not exist; a configured access file never "
        "means 'access control off' (unset WAP_ACCESS for that)\n"
    )
    _clean_env(monkeypatch, home, WAP_NOTIFY=str(tmp_path / "notify.yml"))
    assert cli("whoami") == (
        2,
        "",
        f"error: {tmp_path / 'notify.yml'}: the notifications file (WAP_NOTIFY) does not exist\n",
    )
    (tmp_path / "land").mkdir()
    _clean_env(monkeypatch, home, WAP_INGEST_ROOTS=f"{tmp_path / 'land'}:{tmp_path / 'lnad'}")
    assert cli("whoami") == (
        2,
        "",
        f"error: {tmp_path / 'lnad'}: the ingest root (WAP_INGEST_ROOTS) does not exist\n",
    )
    # unset WAP_ACCESS and no $WAP_HOME/access.yml: access control is off (the only way)
    _clean_env(monkeypatch, home)
    code, out, err = cli("whoami")
    assert code == 0 and out.splitlines()[0] == "root" and "access control is off" in err
    # a configured file that is there is used
    (tmp_path / "roles.yml").write_text(ACCESS.replace("admin: [root]", "admin: [ops]"))
    _clean_env(monkeypatch, home, WAP_ACCESS=str(tmp_path / "roles.yml"))
    assert (
        cli("whoami", "--json")[1].replace(" ", "").replace("\n", "") == '{"user":"root","roles":["viewer"]}'
    )


def test_cli_subprocess_refuses_a_missing_access_file_in_one_line(tmp_path: Path) -> None:
    home = _home(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAP_")}
    env.update({"WAP_HOME": str(home), "WAP_USER": "root", "WAP_ACCESS": str(tmp_path / "acess.yml")})
    p = subprocess.run(
        [sys.executable, "-m", "wap_core", "branches"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.splitlines() == [
        f"error: {tmp_path / 'acess.yml'}: the access file (WAP_ACCESS) does not exist; a configured access "
        "file never means 'access control off' (unset WAP_ACCESS for that)"
    ]


# ----------------------------------------------------------------------------- the console
def _console(monkeypatch: pytest.MonkeyPatch, home: Path, **extra: str) -> AppTest:
    import streamlit as st

    _clean_env(monkeypatch, home, WAP_SPARK_EAGER="0", **extra)
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _errors(at: AppTest) -> list[str]:
    return [str(e.value).replace("\\", "").replace("\u2060", "") for e in at.error]


@pytest.mark.parametrize("var", ["WAP_ACCESS", "WAP_NOTIFY", "WAP_INGEST_ROOTS"])
def test_console_start_shows_the_missing_path_in_one_line_and_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str
) -> None:
    home = _home(tmp_path)
    missing = tmp_path / "not_there"
    at = _console(monkeypatch, home, **{var: str(missing)})
    what = {
        "WAP_ACCESS": "the access file (WAP_ACCESS) does not exist; a configured access file never means "
        "'access control off' (unset WAP_ACCESS for that)",
        "WAP_NOTIFY": "the notifications file (WAP_NOTIFY) does not exist",
        "WAP_INGEST_ROOTS": "the ingest root (WAP_INGEST_ROOTS) does not exist",
    }[var]
    assert _errors(at) == [f"{missing}: {what}"]
    assert not at.title and not at.sidebar.caption  # nothing else ran: no page, no sidebar


# ----------------------------------------------------------------------------- object-store roots (no server)
def test_ingest_roots_take_urls_next_to_colon_separated_local_paths(tmp_path: Path) -> None:
    home = _home(tmp_path)
    # ':' still separates local roots; it never splits a URL's '://'; a line break separates too
    env = {"WAP_HOME": str(home), "WAP_INGEST_ROOTS": "/data/in:/data/b"}
    assert Settings.from_env(env=env).ingest_roots == (Path("/data/in"), Path("/data/b"))
    env["WAP_INGEST_ROOTS"] = "/data/in:s3a://lake/landing/:s3://lake2:/data/b\n//net/share"
    s = Settings.from_env(env=env)
    assert s.ingest_roots == (
        Path("/data/in"),
        "s3a://lake/landing",  # canonical: s3:// and s3a:// name the same place, no trailing '/'
        "s3a://lake2",
        Path("/data/b"),
        Path("//net/share"),
    )
    assert s.ingest_root_paths == (Path("/data/in"), Path("/data/b"), Path("//net/share"))
    assert [str(u) for u in s.ingest_root_urls] == ["s3a://lake/landing", "s3a://lake2"]
    # only URL roots: the default landing folder is not added (configured roots replace it)
    only = Settings(home=home, ingest_roots=("s3://lake/landing",))
    assert only.ingest_root_paths == () and "s3a://lake/landing" in describe_roots(only)
    (home / "wap.toml").write_text('ingest_roots = ["/data/in", "s3a://lake/in"]\n')
    assert Settings.from_env(env={"WAP_HOME": str(home)}).ingest_roots == (Path("/data/in"), "s3a://lake/in")


@pytest.mark.parametrize(
    ("root", "why"),
    [
        ("http://lake/landing", "the scheme http:// is not allowed"),
        ("file:///srv/landing", "the scheme file:// is not allowed"),
        ("s3a://lake/in/../out", "'..' segment"),
        ("s3a://lake/in//out", "empty"),
        ("s3a://lake/%2e%2e/out", "character"),
        ("s3a://Lake_Bucket/in", "not a valid bucket name"),
        ("s3a://wapkey0001:wap-secret-98765@lake/in", "user or password"),
    ],
)
def test_a_malformed_url_root_is_an_error_naming_the_setting(tmp_path: Path, root: str, why: str) -> None:
    with pytest.raises(ValidationError, match="ingest root \\(WAP_INGEST_ROOTS\\)") as info:
        Settings(home=tmp_path, ingest_roots=(tmp_path, root))
    assert why in str(info.value) and "wap-secret-98765" not in str(info.value)
    if "@" not in root:  # the same from the environment, ':'-separated after a local root
        with pytest.raises(ValidationError, match=why):
            Settings.from_env(env={"WAP_HOME": str(tmp_path), "WAP_INGEST_ROOTS": f"{tmp_path}:{root}"})


def test_a_url_root_is_probed_at_start_and_named_when_unreadable(tmp_path: Path) -> None:
    home = _home(tmp_path)
    s = Settings(home=home, ingest_roots=(tmp_path, "s3://lake/landing"), s3_endpoint="http://127.0.0.1:9")
    s.check_configured_paths()  # no probe: the structure only (checked when the settings were made)
    asked: list[str] = []

    def probe(settings: Settings, root: object) -> str | None:
        asked.append(str(root))
        return "cannot be read: object store http://127.0.0.1:9: unreachable or unavailable"

    with pytest.raises(ValidationError) as info:
        s.check_configured_paths(probe=probe)
    assert asked == ["s3a://lake/landing"]
    assert str(info.value) == (
        "s3a://lake/landing: the ingest root (WAP_INGEST_ROOTS) cannot be read: "
        "object store http://127.0.0.1:9: unreachable or unavailable"
    )
    # the real probe against a store that is not there (port 9, discard): the same kind of line, fast
    with pytest.raises(
        ValidationError, match=r"s3a://lake/landing: the ingest root .* cannot be read: object store"
    ):
        s.check_configured_paths(probe=root_problem)


def test_a_url_source_needs_an_object_store_and_an_allowed_scheme(tmp_path: Path) -> None:
    home = _home(tmp_path)
    local = Settings(home=home)  # no object store configured
    with pytest.raises(SourceError, match="no object store is configured"):
        fetch_url_sources(local, ["s3a://lake/in/x.csv"], SourcePolicy.ANY)
    with pytest.raises(SourceError, match="the scheme http:// is not allowed"):
        fetch_url_sources(local, ["http://lake/in/x.csv"], SourcePolicy.ANY)
    for url in ("http://lake/in/x.csv", "file:///etc/passwd", "s3a://lake/in/x.csv"):
        with pytest.raises(PathNotAllowedError, match="outside the allowed ingest roots"):
            fetch_url_sources(local, [url], SourcePolicy.CONFINED)  # no object-store root: nothing allowed
    assert fetch_url_sources(local, ["/data/x.csv"], SourcePolicy.CONFINED) == (["/data/x.csv"], {})


def test_a_url_with_user_info_is_refused_and_its_key_never_echoed_nor_journaled(tmp_path: Path) -> None:
    """Issue 25 item 6: ``s3a://KEY:SECRET@bucket/...`` (or ``s3a://KEY@...``) is refused on its structure; the
    access key id is user info too: it is in no error, no journal row, no CLI output (``s3a://***@bucket``)."""
    key, secret = "AKIAEXAMPLE7Q2X9ZKEY", "s3cr3t/With+Slash"
    home = _home(tmp_path)
    lh = Lakehouse(Settings(home=home, ingest_roots=(tmp_path, "s3a://lake/landing"), user="root"))
    t = TableId("demo", "t")
    urls = (
        f"s3a://{key}:{secret}@lake/landing/x.csv",
        f"s3a://{key}@lake/landing/x.csv",
        f"s3://{key}:{secret}@lake/landing/*.csv",
        f"S3A://{key}@lake/landing/x.csv",
    )
    for url in urls:
        for policy, error in ((SourcePolicy.CONFINED, PathNotAllowedError), (SourcePolicy.ANY, SourceError)):
            with pytest.raises(error) as info:
                ingest(lh, t, [url], source_policy=policy)
            message = str(info.value)
            assert key not in message and "s3cr3t" not in message, message
            if policy is SourcePolicy.CONFINED:
                assert "***@lake/landing" in message, message  # the URL still recognizable
    entries = lh.journal.history(str(t))
    assert len(entries) == 2 * len(urls) and {e.outcome for e in entries} == {Outcome.ERROR}
    stored = repr([(e.reason, e.details) for e in entries])
    assert key not in stored and "s3cr3t" not in stored and "s3a://***@lake/landing/x.csv" in stored, stored
    with pytest.MonkeyPatch.context() as mp:  # the CLI (no object store configured: refused on the structure)
        _clean_env(mp, home)
        code, out, err = cli("ingest", "demo.t", urls[0])
    assert code == 2 and err.startswith("error: source ") and key not in out + err and "s3cr3t" not in err
    assert key not in repr([e.details for e in lh.journal.history(str(t))])


def test_object_keys_may_hold_a_colon() -> None:
    """Issue 25 item 6: ``:`` is legal in an S3 key (``2024-01-01T00:00:00.csv``); it never made a bucket or port."""
    assert parse_store_url("s3a://lake/in/2024-01-01T00:00:00.csv").key == "in/2024-01-01T00:00:00.csv"
    assert parse_store_url("s3a://lake/in/*:*.csv", pattern=True).is_pattern
    for bad in ("s3a://lake:9000/in/x.csv", "s3a://k:s@lake/in/x.csv"):
        with pytest.raises(ValidationError):
            parse_store_url(bad)
