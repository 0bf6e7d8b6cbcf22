"""Notifications against a REAL local HTTP receiver (http.server on 127.0.0.1 in a thread).

Covers the notify file (typed specs, file:line errors, masked secrets), the json and slack bodies
of every event the core emits (from a real failing ingest, publishes, a forced publish, a refusal,
a discard; a publish recorded by reconciliation after a kill), the Review deep link (parsed, and
opened in Chromium against a running console), delivery off the action's path (a receiver that
holds its answer and a black hole do not hold up publish), retries on 500 then success delivered
once, failures journaled after the retries, 4xx not retried, 429 retried, table and event filters,
two processes claiming one outbox, the CLI's bounded exit grace with the rest delivered by the next
process, and ``notify-test``.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pytest
from helpers import (
    CHROMIUM,
    browser_page,
    free_port,
    lake_env,
    lake_settings,
    running,
    streamlit_cmd,
    write_csv,
)

from wap_core import Lakehouse, TableId, notify
from wap_core.cli import main
from wap_core.exceptions import NotifyFileError
from wap_core.notify import PAYLOAD_KEYS, DeliveryState, Event, WebhookFormat
from wap_core.values import to_jsonable
from wap_core.workflow.reconcile import reconcile

ROOT = Path(__file__).resolve().parent.parent
_names = itertools.count(1)
SECRET = "T0SeCrEt/B0SeCrEt/XyZtOkEnSeCrEt123"  # a Slack-like path: the URL is the credential
FAST = "delivery: {attempts: 3, backoff_seconds: 0.05, timeout_seconds: 5, exit_grace_seconds: 5}\n"


# ----------------------------------------------------------------------------- the receiver
@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """A real HTTP server recording every POST. Per path: a script of statuses to answer first
    (then ``always`` or 200), an optional gate the answer waits for, an optional delay."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.script: dict[str, list[int]] = {}
        self.always: dict[str, int] = {}
        self.gates: dict[str, threading.Event] = {}
        self.delay: dict[str, float] = {}
        self.cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path
                with outer.cond:
                    outer.requests.append(Received(path, dict(self.headers.items()), body))
                    outer.cond.notify_all()
                    plan = outer.script.get(path)
                    status = plan.pop(0) if plan else outer.always.get(path, 200)
                gate = outer.gates.get(path)
                if gate is not None:
                    gate.wait(60)
                if outer.delay.get(path):
                    time.sleep(outer.delay[path])
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def on(self, path: str) -> list[Received]:
        with self.cond:
            return [r for r in self.requests if r.path == path]

    def wait_for(self, path: str, n: int, timeout: float = 60) -> list[Received]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len([r for r in self.requests if r.path == path]) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    got = [r.path for r in self.requests]
                    raise AssertionError(f"{path}: {n} request(s) expected within {timeout}s, got {got}")
                self.cond.wait(left)
        return self.on(path)

    def close(self) -> None:
        for gate in self.gates.values():
            gate.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(autouse=True)
def _stop_deliverers() -> Iterator[None]:
    yield
    notify.stop_all()


def closed_port_url() -> str:
    """A dead URL: nothing listens there (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/dead"


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A dead URL that never answers: the kernel accepts the connection, nobody reads or writes."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield f"http://127.0.0.1:{s.getsockname()[1]}/hole"
    s.close()


def wait_until(pred: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def settled(lh: Lakehouse, n: int | None = None, timeout: float = 60) -> list[notify.OutboxRow]:
    """The outbox once no row is pending or being delivered (and, if given, ``n`` rows exist)."""

    def done() -> list[notify.OutboxRow] | None:
        rows = notify.outbox(lh.journal)
        ok = all(r.status in ("delivered", "failed") for r in rows) and (n is None or len(rows) == n)
        return rows if ok and rows else None

    return list(wait_until(done, timeout, "the outbox to settle"))


def meta_lakehouse(tmp_path: Path, notify_yml: str | None, **kw: Any) -> Lakehouse:
    """A lakehouse for metadata-only tests (no Spark): catalog DB, journal, PyIceberg tables."""
    home = tmp_path / f"lh{next(_names)}"
    home.mkdir(parents=True)
    if notify_yml is not None:
        (home / "notify.yml").write_text(notify_yml)
    return Lakehouse(lake_settings(home, f"nt{next(_names)}", user=str(kw.pop("user", "tester")), **kw))


def pyiceberg_branch(lh: Lakehouse, table: str = "demo.t", branch: str = "b1") -> int:
    """A real Iceberg table (PyIceberg, no Spark) with one commit on main and one on ``branch``; returns its head."""
    ns = table.split(".", maxsplit=1)[0]
    if (ns,) not in lh.catalog.list_namespaces():
        lh.catalog.create_namespace(ns)
    tbl = lh.catalog.create_table(table, schema=pa.schema([pa.field("id", pa.int64(), nullable=True)]))
    tbl.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    tbl = lh.catalog.load_table(table)
    tbl.manage_snapshots().create_branch(tbl.metadata.current_snapshot_id, branch).commit()
    tbl = lh.catalog.load_table(table)
    tbl.append(pa.table({"id": pa.array([3], pa.int64())}), branch=branch)
    return int(lh.catalog.load_table(table).metadata.refs[branch].snapshot_id)


def cli_env(lh: Lakehouse, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAP_")}
    env.update(lake_env(lh.settings, "cli-user", WAP_NOTIFY=str(lh.settings.notify_file)))
    return {**env, "PYTHONPATH": str(ROOT), **extra}


# ----------------------------------------------------------------------------- the notify file
def test_the_notify_file_is_parsed_into_typed_specs(tmp_path: Path) -> None:
    path = tmp_path / "notify.yml"
    path.write_text(f"""console_url: https://wap.corp.test/console/
webhooks:
  - url: http://127.0.0.1:9999/hook
    format: json
    events: [audit_failed, awaiting_approval, changes_requested, published, discarded, refused, rolled_back]
    tables: ["demo.*"]
  - url: https://hooks.slack.com/services/{SECRET}
    format: slack
delivery: {{attempts: 4, backoff_seconds: 0.5, timeout_seconds: 3, exit_grace_seconds: 2}}
""")
    cfg = notify.load_config(path)
    assert cfg.exists and cfg.console_url == "https://wap.corp.test/console"
    a, b = cfg.webhooks
    assert (a.format, a.tables, a.source) == (WebhookFormat.JSON, ("demo.*",), f"{path}:3")
    assert a.events == frozenset(Event) - {Event.EXPIRED, Event.QUARANTINED, Event.TEST}
    assert (b.format, b.tables, b.events) == (WebhookFormat.SLACK, ("*",), frozenset(notify.NOTIFIABLE))
    assert cfg.delivery == notify.DeliveryPolicy(
        attempts=4, backoff_seconds=0.5, timeout_seconds=3, exit_grace_seconds=2
    )
    assert [cfg.delivery.delay(n) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    # the Slack URL is a secret: masked, out of repr, out of every masked text
    assert b.masked_url == "https://hooks.slack.com/***"
    assert SECRET not in repr(b) and SECRET not in repr(cfg)
    from wap_core.config import mask_secrets

    assert SECRET not in mask_secrets(f"POST to {b.url} failed")
    # filters: fnmatch on namespace.table, events by name
    assert a.matches(Event.PUBLISHED, "demo.flights") and not a.matches(Event.PUBLISHED, "sales.orders")
    assert not a.matches(Event.EXPIRED, "demo.flights") and b.matches(Event.EXPIRED, "sales.orders")
    # no file: no targets
    none = notify.load_config(tmp_path / "absent.yml")
    assert (none.exists, none.webhooks) == (False, ())
    empty = tmp_path / "empty.yml"
    empty.write_text("# nothing yet\n")
    assert notify.load_config(empty).webhooks == ()


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("webhooks: [\n", 2, "invalid YAML"),
        ("console_url: http://x\nhooks: []\n", 2, "unknown key 'hooks'"),
        ("webhooks:\n  url: http://x/h\n", 2, "webhooks must be a list"),
        ("webhooks:\n  - format: json\n", 2, "a webhook needs a url"),
        ("webhooks:\n  - url: ftp://x/h\n", 2, "must be an http(s) URL"),
        ("webhooks:\n  - url: http://x/h\n    format: xml\n", 3, "format must be json or slack"),
        (
            "webhooks:\n  - url: http://x/h\n    events: [published, pubished]\n",
            3,
            "unknown event 'pubished'",
        ),
        ("webhooks:\n  - url: http://x/h\n    tables: []\n", 3, "tables must not be empty"),
        ("webhooks:\n  - url: http://x/h\n    tables: demo.*\n", 3, "tables must be a list"),
        ("webhooks:\n  - url: http://x/h\n    colour: red\n", 3, "unknown key 'colour'"),
        ("webhooks:\n  - url: http://x/h\n    url: http://y/h\n", 3, "given twice"),
        ("console_url: javascript:alert(1)\n", 1, "must be an http(s) URL"),
        ("console_url: http://x/?a=1\n", 1, "base URL"),
        ("delivery:\n  attempts: 0\n", 2, "attempts must be an integer between 1 and 20"),
        ("delivery:\n  timeout_seconds: true\n", 2, "timeout_seconds must be a number"),
        ("- just\n- a list\n", 1, "must be a mapping"),
    ],
)
def test_a_broken_notify_file_is_an_error_naming_file_and_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = tmp_path / "notify.yml"
    path.write_text(text)
    with pytest.raises(NotifyFileError) as err:
        notify.load_config(path)
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)
    assert message in str(err.value)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)


def test_errors_about_a_secret_url_never_show_it(tmp_path: Path) -> None:
    path = tmp_path / "notify.yml"
    path.write_text(
        f"webhooks:\n  - url: https://hooks.slack.com/services/{SECRET}\n    format: teams\n"
        f"  - url: https://hooks.slack.com:bad/services/{SECRET}x\n"
    )
    with pytest.raises(NotifyFileError) as err:
        notify.load_config(path)
    assert "format must be json or slack" in str(err.value)
    path.write_text(f"webhooks:\n  - url: 'https://hooks.slack.com:bad/services/{SECRET}'\n")
    with pytest.raises(NotifyFileError) as err:
        notify.load_config(path)
    assert "invalid port" in str(err.value) and SECRET not in str(err.value)


# ----------------------------------------------------------------------------- what is sent
def test_payload_keys_link_and_slack_body_escape_user_text() -> None:
    cfg = notify.NotifyConfig(path=Path("n.yml"), exists=True, console_url="http://console.test:8501")
    hostile = "ann <!channel> & <https://evil.test|click> *bold*"
    note = notify.build(
        cfg,
        Event.AUDIT_FAILED,
        table="demo.flights",
        branch="audit_2013_02_w2",
        user=hostile,
        status="failed",
        failed_checks=["not_null(dep_time)", "a<b"],
        summary="2 checks failed & <b>more</b>",
        snapshot_id=42,
    )
    p = note.payload()
    assert tuple(p) == PAYLOAD_KEYS
    assert p["link"] == "http://console.test:8501/review?table=demo.flights&branch=audit_2013_02_w2"
    assert p["user"] == hostile and p["failed_checks"] == ["not_null(dep_time)", "a<b"]
    assert datetime.fromisoformat(p["at"]).utcoffset() is not None
    # odd names are URL-encoded in the link (each query value decodes back exactly)
    odd = notify.link_for(cfg.console_url, Event.REFUSED, "a b&c=d", "x/y?#")
    assert odd == "http://console.test:8501/review?table=a%20b%26c%3Dd&branch=x%2Fy%3F%23"
    assert parse_qs(urlsplit(odd).query) == {"table": ["a b&c=d"], "branch": ["x/y?#"]}
    # a rollback links to History
    assert (
        notify.link_for(cfg.console_url, Event.ROLLED_BACK, "demo.flights", "main")
        == "http://console.test:8501/history?table=demo.flights"
    )

    slack = json.loads(note.body(WebhookFormat.SLACK))
    assert set(slack) == {"text", "blocks"}
    section, fields, actions = slack["blocks"]
    text = section["text"]["text"]
    assert section["text"]["type"] == "mrkdwn"
    assert (
        "demo.flights · audit_2013_02_w2" in text and "2 checks failed &amp; &lt;b&gt;more&lt;/b&gt;" in text
    )
    assert f"<{p['link']}|Open review>" in text
    facts = "\n".join(f["text"] for f in fields["fields"])
    assert "ann &lt;!channel&gt; &amp; &lt;https://evil.test|click&gt; *bold*" in facts
    assert "not_null(dep_time), a&lt;b" in facts and "*Snapshot:* 42" in facts and "*Status:* failed" in facts
    everything = json.dumps(slack)
    assert (
        "<!channel>" not in everything and "<https://evil.test" not in everything and "<b>" not in everything
    )
    assert actions["elements"][0]["url"] == p["link"] and actions["elements"][0]["type"] == "button"
    assert slack["text"].startswith("Audit failed: demo.flights · audit_2013_02_w2 by ann &lt;!channel&gt;")
    # secrets in user text are masked in what leaves the process
    leaky = notify.build(
        cfg,
        Event.REFUSED,
        table="t.t",
        branch="b",
        user="u",
        summary="cannot reach postgresql://wap:Sup3rS3cret@db/x",
    )
    assert "Sup3rS3cret" not in json.dumps(leaky.payload()) and "Sup3rS3cret" not in json.dumps(leaky.slack())


def test_table_and_event_filters(tmp_path: Path, receiver: Receiver) -> None:
    lh = meta_lakehouse(
        tmp_path,
        f"""console_url: http://console.test
webhooks:
  - url: {receiver.url("/published-demo")}
    events: [published]
    tables: ["demo.*"]
  - url: {receiver.url("/discards-other")}
    format: slack
    events: [discarded, refused]
    tables: ["other.t?", "x.y"]
  - url: {receiver.url("/all")}
""",
    )
    emitted = [
        (Event.PUBLISHED, "demo.flights"),
        (Event.PUBLISHED, "other.t1"),
        (Event.DISCARDED, "other.t1"),
        (Event.DISCARDED, "other.t10"),
        (Event.REFUSED, "x.y"),
        (Event.AUDIT_FAILED, "demo.flights"),
        (Event.DISCARDED, "demo.flights"),
    ]
    for event, table in emitted:
        notify.emit(
            lh.journal,
            lh.settings,
            event,
            table=table,
            branch="b",
            user="u",
            summary=f"{event.value} {table}",
        )
    rows = settled(lh, 10)
    cfg = notify.config_for(lh.settings)
    by_key = {w.key: w.url.rsplit("/", 1)[1] for w in cfg.webhooks}
    targets = sorted((by_key[r.target], r.event, r.table) for r in rows)
    assert targets == sorted(
        [
            ("published-demo", "published", "demo.flights"),
            ("discards-other", "discarded", "other.t1"),
            ("discards-other", "refused", "x.y"),
            *[("all", e.value, t) for e, t in emitted],
        ]
    )
    assert all(r.status == "delivered" and r.attempts == 1 for r in rows)
    assert [r.json["summary"] for r in receiver.on("/published-demo")] == ["published demo.flights"]
    assert len(receiver.on("/all")) == 7
    slack = [r.json for r in receiver.on("/discards-other")]
    assert sorted(s["text"].split(":")[0] for s in slack) == ["Discarded", "Refused"]


# ----------------------------------------------------------------------------- delivery
def test_retries_on_500_then_success_delivered_exactly_once(tmp_path: Path, receiver: Receiver) -> None:
    receiver.script["/flaky"] = [500, 503, 502]
    receiver.script["/busy"] = [429]
    lh = meta_lakehouse(
        tmp_path,
        f"webhooks:\n  - url: {receiver.url('/flaky')}\n  - url: {receiver.url('/busy')}\n"
        "delivery: {attempts: 5, backoff_seconds: 0.05}\n",
    )
    notify.emit(
        lh.journal,
        lh.settings,
        Event.PUBLISHED,
        table="demo.t",
        branch="b1",
        user="ann",
        status="published",
        summary="main moved",
    )
    flaky, busy = sorted(settled(lh, 2), key=lambda r: r.id)
    assert (flaky.status, flaky.attempts, flaky.last_status) == ("delivered", 4, 200)
    assert (busy.status, busy.attempts, busy.last_status) == ("delivered", 2, 200)
    time.sleep(0.3)  # nothing more arrives: delivered once
    got = receiver.on("/flaky")
    assert len(got) == 4 and len({r.body for r in got}) == 1  # the same body every time
    assert got[0].json["event"] == "published" and got[0].headers["Content-Type"].startswith(
        "application/json"
    )
    assert len(receiver.on("/busy")) == 2
    assert lh.journal.history(action="notify") == []


def test_a_failure_is_journaled_after_the_retries_with_the_masked_url(
    tmp_path: Path, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.always["/services/" + SECRET] = 500
    receiver.always["/gone"] = 404
    dead = closed_port_url()
    lh = meta_lakehouse(
        tmp_path,
        f"""webhooks:
  - url: {receiver.url("/services/" + SECRET)}
    format: slack
  - url: {receiver.url("/gone")}
  - url: {dead}
{FAST}""",
    )
    caplog.set_level("INFO", logger="wap_core")
    notify.emit(
        lh.journal,
        lh.settings,
        Event.DISCARDED,
        table="demo.t",
        branch="b1",
        user="bob",
        status="discarded",
        summary="bye",
    )
    rows = {r.target_label: r for r in settled(lh, 3)}
    assert all(r.status == "failed" for r in rows.values())
    assert len(receiver.on("/services/" + SECRET)) == 3  # 5xx: every allowed attempt
    assert len(receiver.on("/gone")) == 1  # 4xx: never retried
    failures = {
        e.details["format"] + str(e.details["status_code"]): e for e in lh.journal.history(action="notify")
    }
    assert set(failures) == {"slack500", "json404", "jsonNone"}
    slack = failures["slack500"]
    assert (slack.outcome, slack.user, slack.table, slack.branch) == ("failed", "bob", "demo.t", "b1")
    assert slack.details["attempts"] == 3 and slack.details["target"].endswith("/***")
    assert "HTTP 500" in (slack.reason or "") and "discarded notification" in (slack.reason or "")
    assert failures["json404"].details["attempts"] == 1
    refused = failures["jsonNone"]
    assert refused.details["attempts"] == 3 and "ConnectionRefused" in refused.details["error"]
    # the secret never surfaces: not in the journal, the outbox, the log
    everything = json.dumps([to_jsonable(e) for e in lh.journal.history()]) + json.dumps(
        [to_jsonable(r) for r in notify.outbox(lh.journal)]
    )
    assert SECRET not in everything and "XyZtOkEnSeCrEt123" not in everything
    assert "XyZtOkEnSeCrEt123" not in caplog.text and "failed after 3 attempt(s)" in caplog.text


def test_a_broken_notify_file_never_fails_the_action_and_is_journaled(tmp_path: Path) -> None:
    lh = meta_lakehouse(tmp_path, "webhooks:\n  - url: http://127.0.0.1:9/h\n    events: [publishd]\n")
    head = pyiceberg_branch(lh)
    from wap_core.workflow.discard import discard

    res = discard(
        lh, TableId("demo", "t"), "b1", reason="not needed"
    )  # emits discarded: the broken file must not fail it
    assert res.head == head and "b1" not in lh.table(TableId("demo", "t")).metadata.refs
    entry = lh.journal.history(action="notify")[0]
    assert entry.outcome == "failed" and entry.table == "demo.t" and entry.branch == "b1"
    assert f"{lh.settings.notify_file}:3: unknown event 'publishd'" in (entry.reason or "")
    assert notify.outbox(lh.journal) == []


def test_two_processes_never_deliver_the_same_row(tmp_path: Path, receiver: Receiver) -> None:
    receiver.delay["/hook"] = 0.2
    lh = meta_lakehouse(tmp_path, f"webhooks:\n  - url: {receiver.url('/hook')}\n")
    cfg = notify.config_for(lh.settings)
    for n in range(24):  # queued directly (no deliverer in this process)
        notify.enqueue(
            lh.journal,
            notify.build(cfg, Event.PUBLISHED, table="demo.t", branch=f"b{n}", user="u", summary=f"n={n}"),
            cfg.webhooks,
        )
    go = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        "from wap_core import Lakehouse, notify\n"
        "lh = Lakehouse.from_env(); d = notify.deliverer_for(lh.journal, lh.settings.notify_file); cfg = notify.config_for(lh.settings)\n"
        "lh.journal; print('ready', flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.005)\n"
        "n = 0\n"
        "while (k := d.deliver_due(cfg)): n += k\n"
        "print(n, flush=True)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            env=cli_env(lh),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        go.touch()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    counts = [int(o[0].strip()) for o in outs]
    assert sum(counts) == 24, counts
    summaries = sorted(r.json["summary"] for r in receiver.on("/hook"))
    assert summaries == sorted(f"n={n}" for n in range(24))  # each row once, none twice
    assert all(r.status == "delivered" and r.attempts == 1 for r in notify.outbox(lh.journal))


def test_the_cli_waits_a_bounded_grace_and_the_next_process_delivers_the_rest(
    tmp_path: Path, receiver: Receiver, black_hole: str
) -> None:
    receiver.always["/down"] = 500
    lh = meta_lakehouse(
        tmp_path,
        f"""webhooks:
  - url: {receiver.url("/down")}
    events: [discarded]
  - url: {black_hole}
    events: [discarded]
delivery: {{attempts: 5, backoff_seconds: 0.3, timeout_seconds: 60, exit_grace_seconds: 1}}
""",
    )
    pyiceberg_branch(lh)
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "wap_core", "discard", "demo.t", "b1", "--reason", "duplicate batch"],
        env=cli_env(lh),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert "discarded demo.t b1" in p.stdout
    assert elapsed < 40, (
        elapsed
    )  # the black hole would hold it 60 s per attempt: the grace (1 s) bounds the exit
    assert "b1" not in lh.table(TableId("demo", "t")).metadata.refs
    rows = {r.target_label: r for r in notify.outbox(lh.journal)}
    assert set(rows) == {notify.mask_url(receiver.url("/down")), notify.mask_url(black_hole)}
    down = rows[notify.mask_url(receiver.url("/down"))]
    assert down.status == DeliveryState.PENDING.value and 1 <= down.attempts < 5 and down.last_status == 500
    tried = len(receiver.on("/down"))
    assert tried == down.attempts
    assert lh.journal.history(action="notify") == []  # not failed: left for a later process
    # the next process (here: this one) delivers what the CLI left, once
    receiver.always["/down"] = 200
    notify.deliverer_for(lh.journal, lh.settings.notify_file).wake()
    wait_until(
        lambda: [r for r in notify.outbox(lh.journal) if r.id == down.id and r.status == "delivered"],
        30,
        "the retry",
    )
    time.sleep(0.3)
    assert len(receiver.on("/down")) == tried + 1
    body = receiver.on("/down")[-1].json
    assert (body["event"], body["user"], body["status"], body["branch"]) == (
        "discarded",
        "cli-user",
        "discarded",
        "b1",
    )
    assert "duplicate batch" in body["summary"]


def test_a_publish_recorded_by_reconciliation_is_notified(tmp_path: Path, receiver: Receiver) -> None:
    lh = meta_lakehouse(
        tmp_path, f"console_url: http://console.test\nwebhooks:\n  - url: {receiver.url('/hook')}\n{FAST}"
    )
    head = pyiceberg_branch(lh)
    p = subprocess.run(
        [sys.executable, "-m", "wap_core", "publish", "demo.t", "b1", "--force", "--reason", "hotfix"],
        env=cli_env(lh, WAP_FAULT="after_publish_batch_commit"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 137, p.stderr
    assert receiver.on("/hook") == []  # killed before its outcome (and its notification)
    reconcile(lh)  # the next entry point (a CLI start, the console tick) reconciles
    body = receiver.wait_for("/hook", 1)[0].json
    assert (body["event"], body["status"], body["user"], body["table"], body["branch"]) == (
        "published",
        "forced",
        "cli-user",
        "demo.t",
        "b1",
    )
    assert "reconciliation" in body["summary"] and "hotfix" in body["summary"]
    assert body["link"] == "http://console.test/review?table=demo.t&branch=b1"
    assert lh.table(TableId("demo", "t")).metadata.refs["main"].snapshot_id == head


def test_an_authorization_refusal_is_notified(tmp_path: Path, receiver: Receiver) -> None:
    from wap_core.exceptions import AccessDeniedError
    from wap_core.workflow.discard import discard

    lh = meta_lakehouse(
        tmp_path,
        f"console_url: http://console.test\nwebhooks:\n  - url: {receiver.url('/hook')}\n"
        "    events: [refused]\n" + FAST,
    )
    (lh.settings.home / "access.yml").write_text("roles:\n  viewer: ['*']\n  admin: [root@corp.test]\n")
    pyiceberg_branch(lh)
    with pytest.raises(AccessDeniedError):
        discard(lh, TableId("demo", "t"), "b1", reason="cleanup", user="vic <@corp> & co")
    body = receiver.wait_for("/hook", 1)[0].json
    assert (body["event"], body["status"], body["user"], body["table"], body["branch"]) == (
        "refused",
        "forbidden",
        "vic <@corp> & co",
        "demo.t",
        "b1",
    )
    assert (
        "may not discard" in body["summary"]
        and body["link"] == "http://console.test/review?table=demo.t&branch=b1"
    )
    assert "b1" in lh.table(TableId("demo", "t")).metadata.refs


# ----------------------------------------------------------------------------- notify-test
def test_notify_test_reports_every_target(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lh = meta_lakehouse(
        tmp_path,
        f"""console_url: http://console.test
webhooks:
  - url: {receiver.url("/ok")}
    events: [published]
    tables: ["nothing.*"]
  - url: {receiver.url("/services/" + SECRET)}
    format: slack
delivery: {{attempts: 2, backoff_seconds: 0.05, timeout_seconds: 5}}
""",
    )
    for k, v in cli_env(lh).items():
        if k.startswith("WAP_"):
            monkeypatch.setenv(k, v)
    assert main(["notify-test", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(o["format"], o["delivered"], o["status"], o["attempts"], o["error"]) for o in out] == [
        ("json", True, 200, 1, None),
        ("slack", True, 200, 1, None),
    ]
    assert out[1]["target"] == f"http://127.0.0.1:{receiver.server.server_address[1]}/***"
    assert out[0]["source"] == f"{lh.settings.notify_file}:3"
    test = receiver.on("/ok")[0].json
    assert tuple(test) == PAYLOAD_KEYS and (test["event"], test["user"], test["status"]) == (
        "test",
        "cli-user",
        "test",
    )
    assert test["link"] == "http://console.test/"
    assert receiver.on("/services/" + SECRET)[0].json["text"].startswith("Test notification")

    receiver.always["/services/" + SECRET] = 500
    dead = closed_port_url()
    text = lh.settings.notify_file.read_text()
    lh.settings.notify_file.write_text(text.replace("delivery:", f"  - url: {dead}\ndelivery:"))
    capsys.readouterr()
    assert main(["notify-test"]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].split() == ["TARGET", "FORMAT", "SOURCE", "OUTCOME", "STATUS", "ATTEMPTS", "ERROR"]
    assert "delivered" in lines[1] and "200" in lines[1]
    assert "FAILED" in lines[2] and " 500 " in lines[2] and "HTTP 500" in lines[2]
    assert (
        "FAILED" in lines[3]
        and "ConnectionRefused" in lines[3]
        and dead.rsplit("/", 1)[0] + "/***" in lines[3]
    )
    assert SECRET not in captured.out + captured.err and "XyZtOkEnSeCrEt123" not in captured.out
    assert lh.journal.history(action="notify") == []  # a test is reported, not journaled

    lh.settings.notify_file.write_text("webhooks:\n  - url: http://x/h\n    format: csv\n")
    assert main(["notify-test"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {lh.settings.notify_file}:3: format must be json or slack, not 'csv'"
    lh.settings.notify_file.unlink()
    # a configured notifications file (WAP_NOTIFY) that is not there is an error naming it (issue 19 item 4)
    assert main(["notify-test"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {lh.settings.notify_file}: the notifications file (WAP_NOTIFY) does not exist\n"
    monkeypatch.delenv("WAP_NOTIFY")  # only the default file may be absent: no targets
    assert main(["notify-test"]) == 0
    assert "no notification targets" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the core's events, on real Spark
CHECKS = """
demo.people:
  checks:
    - not_null: [name]
    - range: {column: age, min: 0, max: 150}
"""
HEADER = ["id", "name", "age"]
PEOPLE = TableId("demo", "people")
HOSTILE = "mallory <!here> & co"


@dataclass
class Flow:
    lh: Lakehouse
    receiver: Receiver
    console: str
    failed_checks: list[str]


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Iterator[Flow]:
    """Real ingests, audits, publishes and a discard on real Spark and Iceberg, webhooks on a real receiver."""
    from wap_core.workflow.discard import discard
    from wap_core.workflow.ingest import ingest
    from wap_core.workflow.publish import publish

    receiver = Receiver()
    home = tmp_path_factory.mktemp("notify-flow")
    console = f"http://127.0.0.1:{free_port()}"
    (home / "checks.yml").write_text(CHECKS)
    (home / "notify.yml").write_text(f"""console_url: {console}
webhooks:
  - url: {receiver.url("/json")}
    format: json
    events: [audit_failed, awaiting_approval, changes_requested, published, discarded, refused, rolled_back]
    tables: ["demo.*"]
  - url: {receiver.url("/slack")}
    format: slack
    events: [published]
  - url: {receiver.url("/other")}
    events: [published, discarded, audit_failed, refused]
    tables: ["other.*"]
{FAST}""")
    lh = Lakehouse(lake_settings(home, f"notify{next(_names)}", user="steward", ingest_roots=(home,)))
    src = home / "landing"
    first = write_csv(src / "first.csv", HEADER, [(1, "ann", 30), (2, "bob", 40)])
    ingest(lh, PEOPLE, [first], create=True, branch="first")
    publish(lh, PEOPLE, "first")  # published
    bad = ingest(
        lh, PEOPLE, [write_csv(src / "bad.csv", HEADER, [(3, None, 20), (4, "cy", 200)])], branch="bad"
    )  # audit_failed
    assert bad.audit.status == "failed"
    failed = [c.name for c in bad.audit.checks if c.status in ("failed", "error")]
    with pytest.raises(Exception, match="refused"):
        publish(lh, PEOPLE, "bad")  # refused
    forced = ingest(
        lh, PEOPLE, [write_csv(src / "forced.csv", HEADER, [(5, None, 50)])], branch="forced_one"
    )  # audit_failed
    assert forced.audit.status == "failed"
    publish(
        lh, PEOPLE, "forced_one", force=True, reason="owner <accepts> & ships", user=HOSTILE
    )  # published, forced
    ingest(lh, PEOPLE, [write_csv(src / "third.csv", HEADER, [(6, "dee", 60)])], branch="third")
    discard(lh, PEOPLE, "third", reason="duplicate of first")  # discarded
    yield Flow(lh, receiver, console, failed)
    notify.stop_all()
    receiver.close()


def test_each_core_event_is_delivered_with_its_payload(flow: Flow) -> None:
    lh, rec, console = flow.lh, flow.receiver, flow.console
    got = [r.json for r in rec.wait_for("/json", 6)]
    slack = [r.json for r in rec.wait_for("/slack", 2)]
    rows = settled(lh, 8)
    assert all(r.status == "delivered" and r.attempts == 1 for r in rows)
    assert rec.on("/other") == []  # table filter
    assert all(tuple(p) == PAYLOAD_KEYS for p in got)
    by = {(p["event"], p["branch"]): p for p in got}
    assert sorted(by) == sorted(
        [
            ("published", "first"),
            ("audit_failed", "bad"),
            ("refused", "bad"),
            ("audit_failed", "forced_one"),
            ("published", "forced_one"),
            ("discarded", "third"),
        ]
    )
    link = f"{console}/review?table=demo.people&branch="
    for (_event, branch), p in by.items():
        assert p["table"] == "demo.people" and p["link"] == link + branch, p
        assert datetime.fromisoformat(p["at"]).utcoffset() is not None and p["summary"]

    fail = by[("audit_failed", "bad")]
    assert (fail["status"], fail["user"], fail["failed_checks"]) == ("failed", "steward", flow.failed_checks)
    assert sorted(fail["failed_checks"]) == ["not_null(name)", "range(age)"]
    assert "2 of" in fail["summary"] and "failed" in fail["summary"]
    refused = by[("refused", "bad")]
    assert (
        refused["status"] == "audit_failed"
        and "refused" in refused["summary"]
        and refused["failed_checks"] == []
    )
    pub = by[("published", "first")]
    assert (pub["status"], pub["user"]) == ("published", "steward")
    forced = by[("published", "forced_one")]
    assert (forced["status"], forced["user"]) == ("forced", HOSTILE) and "owner <accepts> & ships" in forced[
        "summary"
    ]
    gone = by[("discarded", "third")]
    assert (gone["status"], gone["user"]) == ("discarded", "steward") and "duplicate of first" in gone[
        "summary"
    ]
    # Slack: the two publishes, user text escaped per Slack's rules
    assert sorted(s["blocks"][2]["elements"][0]["url"] for s in slack) == [
        link + "first",
        link + "forced_one",
    ]
    hostile = next(s for s in slack if "forced_one" in s["text"])
    body = json.dumps(hostile)
    assert "mallory &lt;!here&gt; &amp; co" in body and "<!here>" not in body
    assert "owner &lt;accepts&gt; &amp; ships" in hostile["blocks"][0]["text"]["text"]
    # the journal has no notify failure; the outbox rows name the masked targets only
    assert lh.journal.history(action="notify") == []


def test_the_link_opens_the_review_of_the_branch(flow: Flow) -> None:
    p = next(
        r.json
        for r in flow.receiver.wait_for("/json", 6)
        if r.json["event"] == "audit_failed" and r.json["branch"] == "bad"
    )
    u = urlsplit(p["link"])
    assert (u.scheme + "://" + u.netloc, u.path) == (flow.console, "/review")
    assert parse_qs(u.query) == {"table": ["demo.people"], "branch": ["bad"]}


@pytest.mark.e2e
def test_the_link_opens_the_review_page_in_chromium(flow: Flow) -> None:
    """The console at console_url, the audit_failed link pasted into a fresh Chromium: the Review of that branch."""
    from playwright.sync_api import expect

    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    link = next(
        r.json["link"]
        for r in flow.receiver.wait_for("/json", 6)
        if r.json["event"] == "audit_failed" and r.json["branch"] == "bad"
    )
    port = urlsplit(flow.console).port
    env = cli_env(flow.lh, WAP_USER="reviewer", PYSPARK_PYTHON=sys.executable)
    cmd = streamlit_cmd(port)
    with (
        running(
            cmd,
            cwd=ROOT,
            env=env,
            log=flow.lh.settings.home / "streamlit-notify.log",
            health=f"{flow.console}/_stcore/health",
        ),
        browser_page() as page,
    ):
        page.goto(link)
        expect(page.get_by_role("heading", name="Review", level=1)).to_be_visible()
        expect(page.get_by_text("demo.people · bad").first).to_be_visible()
        expect(page.get_by_text("Audit failed").first).to_be_visible()
        expect(page.get_by_text("not_null(name)").first).to_be_visible()


def test_publish_never_waits_for_a_webhook(
    make_lakehouse: Callable[..., Lakehouse], tmp_path: Path, receiver: Receiver, black_hole: str
) -> None:
    """Structural: publish returns while the receiver still holds its answer and while a black hole swallows
    the other request; the outbox rows exist when publish returns; delivery completes after it."""
    from wap_core.workflow.ingest import ingest
    from wap_core.workflow.publish import publish

    gate = receiver.gates["/held"] = threading.Event()
    lh = make_lakehouse(CHECKS)
    lh.settings.notify_file.write_text(f"""webhooks:
  - url: {receiver.url("/held")}
    events: [published]
  - url: {black_hole}
    events: [published]
delivery: {{attempts: 1, timeout_seconds: 60}}
""")
    res = ingest(
        lh, PEOPLE, [write_csv(tmp_path / "p.csv", HEADER, [(1, "ann", 30)])], create=True, branch="b1"
    )
    assert res.audit.passed
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            publish(lh, PEOPLE, "b1")
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    # publish must end while the receiver holds its answer (gate closed) and the black hole never answers
    assert done.wait(45), "publish waited for a webhook"
    assert errors == []
    assert not gate.is_set()
    rows = notify.outbox(lh.journal)
    assert sorted(r.event for r in rows) == ["published", "published"]
    assert all(r.status in ("pending", "delivering") for r in rows)  # not delivered when publish returned
    assert lh.table(PEOPLE).metadata.refs["main"].snapshot_id == res.snapshot_id
    receiver.wait_for("/held", 1)  # the request is in flight, held
    gate.set()
    held = wait_until(
        lambda: [r for r in notify.outbox(lh.journal) if r.status == "delivered"], 30, "the held delivery"
    )
    assert len(held) == 1 and held[0].attempts == 1
    assert receiver.on("/held")[0].json["event"] == "published"
