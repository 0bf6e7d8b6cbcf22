"""Notifications: webhooks hear about failed audits, publishes, discards and refusals, with a deep link.

The targets file (``WAP_NOTIFY``, default ``$WAP_HOME/notify.yml``)::

    console_url: http://localhost:8501
    webhooks:
      - url: http://127.0.0.1:9999/hook
        format: json                # json | slack
        events: [audit_failed, awaiting_approval, changes_requested, published, discarded, refused, rolled_back]
        tables: ["demo.*"]          # fnmatch patterns on namespace.table
    delivery:                       # optional; these are the defaults
      attempts: 5
      backoff_seconds: 1            # 1, 2, 4, 8 s between attempts (doubling, at most 300 s)
      timeout_seconds: 5
      exit_grace_seconds: 5         # how long a CLI command waits for its notifications at exit

No file: no targets. A broken file is a :class:`NotifyFileError` naming file and line, never
"no targets": ``notify-test`` exits 2 on it and every event it prevents from being queued is
journaled (action ``notify``, outcome ``failed``). Webhook URLs are secrets (a Slack incoming-
webhook URL is its own credential): they are registered with :func:`wap_core.config.mask_secrets`,
shown only masked (``https://hooks.slack.com/***``) and never stored in the database.

Delivery (off the action's path)
--------------------------------
Three modules: :mod:`.config` (the file, events, links), :mod:`.outgoing` (emit, build) and
:mod:`.deliverer` (the thread that sends). :func:`emit` never raises and never touches the network: it renders one request body per
matching target and INSERTs the rows into the outbox table ``wap_outbox`` of the catalog's
database (one statement, one transaction), then wakes this process's deliverer, a daemon thread
started lazily. The deliverer claims a due row with a conditional ``UPDATE`` (``pending`` and due,
or ``delivering`` whose lease expired), so two processes never deliver the same row twice, POSTs
it (standard library ``urllib``, no redirects followed) and records the answer: 2xx ``delivered``;
a 5xx, a 429 or no answer (refused connection, timeout) is retried with exponential backoff up
to ``attempts`` times; any other status fails at once. A row that ends ``failed`` writes, in the
same transaction, a journal row (action ``notify``, outcome ``failed``, the masked URL, the HTTP
status, the attempts). A CLI command waits at most ``exit_grace_seconds`` at exit for its own
rows; what is left stays in the outbox and is delivered by the next process that emits or by
the console's deliverer (started with the console, it polls the outbox).
"""

from __future__ import annotations

from wap_core.notify.config import (
    DEFAULT_CONSOLE_URL,
    NOTIFIABLE,
    PAYLOAD_KEYS,
    DeliveryPolicy,
    DeliveryState,
    Event,
    NotifyConfig,
    Webhook,
    WebhookFormat,
    config_for,
    history_link,
    link_for,
    load_config,
    mask_url,
    parse_notify_text,
    quarantine_link,
    review_link,
    slack_escape,
)
from wap_core.notify.deliverer import (
    Answer,
    Deliverer,
    OutboxRow,
    TestOutcome,
    deliverer_for,
    drain,
    outbox,
    post,
    send_now,
    start_deliverer,
    stop_all,
)
from wap_core.notify.outgoing import Notification, build, emit, emit_outcome, enqueue, notify_test

__all__ = [
    "DEFAULT_CONSOLE_URL",
    "NOTIFIABLE",
    "PAYLOAD_KEYS",
    "Answer",
    "Deliverer",
    "DeliveryPolicy",
    "DeliveryState",
    "Event",
    "Notification",
    "NotifyConfig",
    "OutboxRow",
    "TestOutcome",
    "Webhook",
    "WebhookFormat",
    "build",
    "config_for",
    "deliverer_for",
    "drain",
    "emit",
    "emit_outcome",
    "enqueue",
    "history_link",
    "link_for",
    "load_config",
    "mask_url",
    "notify_test",
    "outbox",
    "parse_notify_text",
    "post",
    "quarantine_link",
    "review_link",
    "send_now",
    "slack_escape",
    "start_deliverer",
    "stop_all",
]
