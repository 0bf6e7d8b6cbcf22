"""The permissions and events more than one action (or none) uses: reading, admin work, refusals, tests."""

from __future__ import annotations

from wap_core.actions.spec import EventSpec, PermissionSpec

READ = PermissionSpec("read", "viewer", "read", "read")  # every page, Explore, query
ADMIN = PermissionSpec("admin", "admin", "run admin actions", "admin")  # gc, rollback, tokens

REFUSED = EventSpec("refused", "Refused", ":no_entry:")  # any refusal (access, a precondition, a race)
TEST = EventSpec("test", "Test notification", ":wave:")  # notify-test

PERMISSIONS = (READ, ADMIN)
EVENTS = (REFUSED, TEST)
