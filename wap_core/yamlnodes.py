"""YAML read as nodes, so that every error in a configuration file (checks, access, notify) names its line."""

from __future__ import annotations

from collections.abc import Callable

import yaml

from wap_core.exceptions import WapError


def compose(text: str, source: str, error: Callable[[str, int | None, str], WapError]) -> yaml.Node | None:
    """The document's root node (None for an empty file); invalid YAML raises ``error(source, line, message)``."""
    try:
        root: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = mark.line + 1 if mark is not None else None
        raise error(source, at, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from exc
    return root


def line(node: yaml.Node) -> int:
    """The 1-based line a node starts on."""
    return int(node.start_mark.line) + 1
