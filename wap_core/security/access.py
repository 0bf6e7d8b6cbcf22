"""Who may do what: roles from the access file, and the one authorization function.

The access file (``WAP_ACCESS``, default ``$WAP_HOME/access.yml``)::

    roles:                      # cumulative: viewer < steward < approver < admin
      viewer: ["*"]             # "*" = every signed-in user (in the CLI: every OS / WAP_USER user)
      steward: [sam@corp.test]
      approver: [ann@corp.test]
      admin: [ops-bot, root]
    policies: {...}             # per-table review policies (parsed by the review workflow)
    cli_identity: token         # optional: the CLI acts only with a service token (WAP_TOKEN); default env

No file at the default place (``$WAP_HOME/access.yml``, ``WAP_ACCESS`` unset): access control is off
and everyone is admin (single-user local use). A configured file (``WAP_ACCESS``) that is missing is
an error at start (:meth:`wap_core.config.Settings.check_configured_paths`) and, once read, its
disappearance is an error too. A broken file (bad YAML, unknown role or key, a non-list) is an
:class:`AccessFileError` naming file and line, never "everyone is admin".

``cli_identity: token`` refuses the CLI's bare environment name (``WAP_USER`` / the OS user): the CLI
then acts only as the user of a valid service token (``WAP_TOKEN``, :mod:`wap_core.security.tokens`),
with the role the token grants. A token's role is also its ceiling: no line of the file (``"*"``
included) raises it (:meth:`AccessPolicy.with_token`).

:func:`decide` is the one authorization decision. Every guarded core operation calls
:meth:`wap_core.session.Session.authorize` first (which decides here and refuses through the session's one
refusal path): the CLI and every console page go through the same rules, and the core refuses even when a
page forgot to disable a button. :func:`decide` answers the same question without journaling, for pages to
disable buttons with the reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Union

import yaml

from wap_core import actions, yamlnodes
from wap_core.exceptions import AccessDeniedError, AccessFileError
from wap_core.values import JsonMapping
from wap_core.yamlnodes import line as _line

if TYPE_CHECKING:
    from wap_core.config import Settings

log = logging.getLogger(__name__)

EVERYONE = "*"
TOP_KEYS = ("roles", "policies", "cli_identity")
CLI_IDENTITIES = ("env", "token")  # cli_identity: the CLI's user from the environment, or only from a token


class Role(IntEnum):
    """Cumulative roles: each one may do everything the lower ones may."""

    VIEWER = 1
    STEWARD = 2
    APPROVER = 3
    ADMIN = 4

    @property
    def label(self) -> str:
        """The role's name in lower case, as written in the access file."""
        return self.name.lower()

    @classmethod
    def parse(cls, name: str) -> Role:
        """The role named ``name`` (any case); ValueError for an unknown name."""
        try:
            return cls[name.strip().upper()]
        except KeyError as exc:
            raise ValueError(f"unknown role {name!r}: use {', '.join(r.label for r in cls)}") from exc


class Permission(str, Enum):
    """What a user asks to do. :data:`RULES` maps each one to the lowest role allowed to."""

    READ = "read"  # every page, Explore, query
    INGEST = "ingest"
    AUDIT = "audit"  # re-run an audit (the audit inside an ingest is part of the ingest)
    REBASE = "rebase"
    QUARANTINE = "quarantine"  # move a failed batch's failing rows to its quarantine table
    DISCARD = "discard"
    COMMENT = "comment"
    PUBLISH = "publish"  # a branch whose audit passed
    APPROVE = "approve"  # approve / request changes
    FORCE_PUBLISH = "force_publish"  # publish over a failed or missing audit, with a reason
    ADMIN = "admin"  # admin actions (gc, rollback, ...)


@dataclass(frozen=True)
class Rule:
    """What one permission needs: the lowest role holding it, its verb and the action journaled on refusal."""

    needed: Role  # the lowest role that holds the permission
    verb: str  # as in "... may not <verb>: ..."
    action: str  # the journal's action of a refusal


# THE table: which role each permission needs. Nothing else decides. Each permission is declared by
# the action(s) needing it (``wap_core.actions``; read and admin in ``actions.common``).
RULES: Mapping[Permission, Rule] = MappingProxyType(
    {Permission(p.word): Rule(Role[p.role.upper()], p.verb, p.refused_as) for p in actions.PERMISSIONS}
)


def _key(user: str) -> str:
    """Users match exactly; e-mail addresses case-insensitively."""
    return user.casefold() if "@" in user else user


@dataclass(frozen=True)
class Grant:
    """One line of the access file: a user (or ``*``) granted a role."""

    user: str  # as written in the file ("*" = everyone signed in)
    role: Role
    line: int


@dataclass(frozen=True)
class AccessPolicy:
    """The parsed access file. ``enabled`` is False when there is no file (everyone is admin)."""

    path: str  # the file consulted
    enabled: bool
    grants: tuple[Grant, ...] = ()
    # ``policies:`` of the file as plain data (read-only), for the review workflow; None when absent.
    policies: JsonMapping | None = None
    policies_line: int | None = None
    # The YAML node of ``policies:`` (line numbers for precise errors when it is parsed further).
    policies_node: yaml.Node | None = field(default=None, compare=False, repr=False)
    cli_identity: str = "env"  # "token": the CLI refuses WAP_USER / the OS user without a service token
    # The user of a verified service token and the token's role: that user holds exactly this role, whatever
    # the grants say (see :meth:`with_token`).
    token_holder: tuple[str, Role] | None = None

    @classmethod
    def off(cls, path: str) -> AccessPolicy:
        """The policy when there is no access file: access control off, everyone is admin."""
        return cls(path=path, enabled=False)

    def role_of(self, user: str) -> Role | None:
        """The user's highest role; None when the file gives them none. Everyone is admin when off."""
        if self.token_holder is not None and user and _key(self.token_holder[0]) == _key(user):
            return self.token_holder[1]  # the token's role is the ceiling: no grant, "*" included, raises it
        if not self.enabled:
            return Role.ADMIN
        if not user:
            return None
        key = _key(user)
        best: Role | None = None
        for g in self.grants:
            if g.user == EVERYONE or _key(g.user) == key:
                best = g.role if best is None else max(best, g.role)
        return best

    def roles_of(self, user: str) -> tuple[Role, ...]:
        """Cumulative: every role up to the user's highest, e.g. (VIEWER, STEWARD)."""
        top = self.role_of(user)
        return tuple(r for r in Role if top is not None and r <= top)

    def members(self, role: Role) -> tuple[str, ...]:
        """The users listed under ``role`` itself (as written)."""
        return tuple(g.user for g in self.grants if g.role == role)

    def with_token(self, user: str, role: Role) -> AccessPolicy:
        """The policy for the user of a verified service token: ``user`` holds exactly ``role``.

        The token's role is a ceiling as well as a grant: neither the file's own lines for that user nor a
        ``"*"`` grant raise it (``steward: ["*"]`` does not make a viewer token a steward), nor does access
        control being off (no file: everyone else is admin). Every other user keeps the file's roles.
        """
        return replace(self, token_holder=(user, role))


@dataclass(frozen=True)
class Decision:
    """Whether ``user`` may do ``permission``, and the one-line reason."""

    allowed: bool
    user: str
    role: Role | None
    needed: Role
    message: str
    permission: Permission = Permission.READ
    action: str = "read"  # the journal's action name

    @property
    def role_label(self) -> str:
        """The user's role as text, or "no role"."""
        return self.role.label if self.role is not None else "no role"


# --------------------------------------------------------------------------- parsing


_STR_TAG = "tag:yaml.org,2002:str"


def _text(node: yaml.Node, source: str, what: str) -> str:
    if not isinstance(node, yaml.ScalarNode) or node.tag != _STR_TAG:
        shown = (
            node.value
            if isinstance(node, yaml.ScalarNode)
            else type(node).__name__.replace("Node", "").lower()
        )
        raise AccessFileError(source, _line(node), f"expected {what} (text), got {shown!r}")
    return str(node.value)


def parse_access(text: str, source: str = "<access>") -> AccessPolicy:
    """Parse the access file's text; every error names ``source`` and the line."""
    root = yamlnodes.compose(text, source, AccessFileError)
    if root is None:
        raise AccessFileError(
            source,
            1,
            "the file is empty: it needs a 'roles' mapping (delete the file to turn access control off)",
        )
    if not isinstance(root, yaml.MappingNode):
        raise AccessFileError(
            source, _line(root), "the file must be a mapping with 'roles' (and optionally 'policies')"
        )
    top = _top_keys(root, source)
    cli_identity = _cli_identity(top, source)
    if "roles" not in top:
        raise AccessFileError(
            source, _line(root), "missing 'roles': map viewer, steward, approver, admin to lists of users"
        )
    grants = _parse_roles(top["roles"][1], source)
    policies, policies_line, policies_node = _parse_policies(top.get("policies"), source)
    return AccessPolicy(
        path=source,
        enabled=True,
        grants=grants,
        policies=policies,
        policies_line=policies_line,
        policies_node=policies_node,
        cli_identity=cli_identity,
    )


def _top_keys(root: yaml.MappingNode, source: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """The file's top-level (key node, value node) by key: known keys only, each once."""
    return yamlnodes.keyed(root, source, TOP_KEYS, AccessFileError, "the access file must be a mapping")


def _cli_identity(top: Mapping[str, tuple[yaml.Node, yaml.Node]], source: str) -> str:
    """``cli_identity``: ``env`` (the default) or ``token``."""
    if "cli_identity" not in top:
        return "env"
    node = top["cli_identity"][1]
    value = node.value if isinstance(node, yaml.ScalarNode) else None
    if value not in CLI_IDENTITIES:
        raise AccessFileError(
            source,
            _line(node),
            f"'cli_identity' must be 'env' (WAP_USER / the OS user) or 'token' (WAP_TOKEN only), got {value!r}",
        )
    return str(value)


def _parse_policies(
    entry: tuple[yaml.Node, yaml.Node] | None, source: str
) -> tuple[JsonMapping | None, int | None, yaml.Node | None]:
    """``policies`` as plain data (None when absent), the line of its key and its mapping node."""
    if entry is None:
        return None, None, None
    key_node, node = entry
    is_null = isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"
    if not (isinstance(node, yaml.MappingNode) or is_null):
        raise AccessFileError(
            source, _line(node), "'policies' must be a mapping from table (or \"*\") to its review policy"
        )
    if not isinstance(node, yaml.MappingNode):
        return MappingProxyType({}), _line(key_node), None
    try:
        plain = yaml.safe_load(yaml.serialize(node))
    except yaml.YAMLError as exc:
        raise AccessFileError(
            source, _line(node), f"invalid 'policies': {getattr(exc, 'problem', None) or exc}"
        ) from exc
    return MappingProxyType(dict(plain or {})), _line(key_node), node


def _parse_roles(node: yaml.Node, source: str) -> tuple[Grant, ...]:
    if not isinstance(node, yaml.MappingNode):
        raise AccessFileError(
            source,
            _line(node),
            "'roles' must be a mapping from role (viewer, steward, approver, admin) to a list of users",
        )
    grants: list[Grant] = []
    seen: set[Role] = set()
    for key_node, val_node in node.value:
        name = _text(key_node, source, "a role name")
        try:
            role = Role.parse(name)
        except ValueError as exc:
            raise AccessFileError(source, _line(key_node), str(exc)) from exc
        if name != role.label:
            raise AccessFileError(source, _line(key_node), f"write the role in lower case: {role.label!r}")
        if role in seen:
            raise AccessFileError(source, _line(key_node), f"role {role.label!r} is given twice")
        seen.add(role)
        if not isinstance(val_node, yaml.SequenceNode):
            raise AccessFileError(
                source,
                _line(val_node),
                f"role {role.label!r} must be a list of users, e.g. [sam@corp.test] ([] for nobody)",
            )
        users: set[str] = set()
        for item in val_node.value:
            user = _text(item, source, "a user name")
            if not user or any(ch.isspace() or not ch.isprintable() for ch in user):
                raise AccessFileError(
                    source, _line(item), f"invalid user name {user!r}: no blanks or control characters"
                )
            if _key(user) in users:
                raise AccessFileError(
                    source, _line(item), f"user {user!r} is listed twice under {role.label!r}"
                )
            users.add(_key(user))
            grants.append(Grant(user, role, _line(item)))
    return tuple(grants)


_cache: dict[str, tuple[tuple[int, int, int], AccessPolicy]] = {}
_cache_lock = threading.Lock()


def load_access(path: str | Path, *, configured: bool = False) -> AccessPolicy:
    """The access policy in ``path``, re-parsed only when the file changed (mtime, size, inode).

    A missing file turns access control off, unless it is ``configured`` (``WAP_ACCESS``) and was read
    before in this process: a configured file that disappears never means "everyone is admin". An
    unreadable or invalid file raises AccessFileError.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        if p.is_symlink():
            raise AccessFileError(str(p), None, "the access file is a dangling symbolic link") from None
        with _cache_lock:
            seen = str(p) in _cache
        if configured and seen:
            raise AccessFileError(
                str(p), None, "the access file (WAP_ACCESS) is gone; access control never turns off by itself"
            ) from None
        return AccessPolicy.off(str(p))
    except OSError as exc:
        raise AccessFileError(str(p), None, f"cannot read: {exc.strerror}") from exc
    if not p.is_file():
        raise AccessFileError(str(p), None, "the access file is not a regular file")
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    with _cache_lock:
        hit = _cache.get(str(p))
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AccessFileError(str(p), None, f"cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    policy = parse_access(text, str(p))
    with _cache_lock:
        _cache[str(p)] = (stamp, policy)
    return policy


# --------------------------------------------------------------------------- deciding

PolicySource = Union["Settings", AccessPolicy]


_token_policies: dict[tuple[int, str, Role], tuple[AccessPolicy, AccessPolicy]] = {}


def access_policy(settings: Settings, token_holder: tuple[str, Role] | None = None) -> AccessPolicy:
    """The access policy of ``settings.access_file``, cached by the file's mtime.

    ``token_holder``: the user of a verified service token and the token's role (the acting identity's,
    :class:`wap_core.session.Identity`): that user holds exactly the token's role.
    """
    policy = load_access(settings.access_file, configured=settings.access_path is not None)
    if token_holder is None:
        return policy
    user, role = token_holder
    key = (id(policy), user, role)
    hit = _token_policies.get(key)
    if hit is not None and hit[0] is policy:
        return hit[1]
    derived = policy.with_token(user, role)
    if len(_token_policies) > 64:
        _token_policies.clear()
    _token_policies[key] = (policy, derived)
    return derived


def _policy(src: PolicySource) -> AccessPolicy:
    return src if isinstance(src, AccessPolicy) else access_policy(src)


def role_of(src: PolicySource, user: str) -> Role | None:
    """The user's highest role under the policy (None for no role; admin when access control is off)."""
    return _policy(src).role_of(user)


def roles_of(src: PolicySource, user: str) -> list[Role]:
    """Cumulative roles of ``user``, lowest first: e.g. [VIEWER, STEWARD]; [] for no role."""
    return list(_policy(src).roles_of(user))


def decide(src: PolicySource, user: str, permission: Permission, *, action: str | None = None) -> Decision:
    """May ``user`` do ``permission``? Pure: nothing is journaled (pages use it to disable buttons).

    ``action`` names the action in the message and the journal when it is more specific than
    the permission (e.g. ``"gc"`` for :attr:`Permission.ADMIN`).
    """
    permission = Permission(permission)
    rule = RULES[permission]
    role = _policy(src).role_of(user)
    allowed = role is not None and role >= rule.needed
    verb = action.replace("_", " ") if action else rule.verb
    who = user or "(anonymous)"
    shown = role.label if role is not None else "no role"
    if allowed:
        message = f"{who} ({shown}) may {verb}"
    else:
        message = f"{who} ({shown}) may not {verb}: {rule.needed.label} role needed"
    return Decision(allowed, user, role, rule.needed, message, permission, action or rule.action)


def denied(d: Decision) -> AccessDeniedError:
    """The refusal of a decision that does not allow (exit 1). Journaled and notified by the one refusal path,
    :meth:`wap_core.session.Session.authorize`."""
    return AccessDeniedError(
        d.message,
        user=d.user,
        role=d.role.label if d.role is not None else None,
        needed=d.needed.label,
        permission=d.permission.value,
    )
