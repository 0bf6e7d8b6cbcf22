"""YAML read as nodes, so that every error in a configuration file (checks, access, notify) names its line."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def keyed(
    node: yaml.Node,
    source: str,
    allowed: Sequence[str],
    error: Callable[[str, int | None, str], WapError],
    not_mapping: str,
) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """``{key: (key node, value node)}`` of a mapping whose keys are all in ``allowed``, each at most once;
    anything else raises ``error`` at the offending line (``not_mapping`` when the node is no mapping)."""
    if not isinstance(node, yaml.MappingNode):
        raise error(source, line(node), not_mapping)
    out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for key_node, val_node in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, str) or key not in allowed:
            shown = key if isinstance(key, str) else "(not a name)"
            raise error(
                source, line(key_node), f"unknown key {shown!r}; expected one of: {', '.join(allowed)}"
            )
        if key in out:
            raise error(source, line(key_node), f"key {key!r} is given twice")
        out[key] = (key_node, val_node)
    return out


def line(node: yaml.Node) -> int:
    """The 1-based line a node starts on."""
    return int(node.start_mark.line) + 1
