"""The guide holds together: every relative link of the README and the docs resolves (file and anchor),
the README stays a short guide with its two commands, every document is reachable from it, and the
architecture diagram names exactly the packages and modules of ``wap_core``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
GUIDE = [
    README,
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "bench" / "results").glob("README.md")),
]

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _unfenced_lines(text: str) -> list[tuple[int, str]]:
    """The numbered lines outside code fences."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append((n, line))
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: its rendered text, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers (duplicates numbered as GitHub does)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _unfenced_lines(path.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if not m:
            continue
        slug = _slug(m.group(2))
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}-{seen[slug]}"
        else:
            seen[slug] = 0
        out.add(slug)
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``path`` whose file, or anchor in a Markdown file, does not exist."""
    problems = []
    for n, line in _unfenced_lines(path.read_text(encoding="utf-8")):
        for target in _LINK.findall(_CODE_SPAN.sub("", line)):  # a link in inline code is not a link
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{n}: {target}"
            if not dest.exists():
                problems.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where} (no heading with anchor #{anchor} in {dest.relative_to(root)})")
    return problems


@pytest.mark.parametrize("doc", GUIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert broken_links(doc) == []


def test_the_link_check_catches_a_broken_link(tmp_path: Path) -> None:
    """The checker itself: a missing file and a missing anchor are reported, good links and code are not."""
    (tmp_path / "other.md").write_text("# Other\n\n## The SQL box (Explore and `query`)\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](other.md#the-sql-box-explore-and-query) [web](https://example.com/x) [self](#title)\n"
        "# Title\n`[code](missing.md)`\n```\n[fenced](missing.md)\n```\n"
        "[gone](missing.md) ![img](nope.png) [bad anchor](other.md#nope)\n"
    )
    assert broken_links(doc, root=tmp_path) == [
        "doc.md:7: missing.md (no such file)",
        "doc.md:7: nope.png (no such file)",
        "doc.md:7: other.md#nope (no heading with anchor #nope in other.md)",
    ]


def test_readme_is_a_short_guide_with_its_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 350
    assert re.search(r"^make run +# ", text, re.M), "the README's first command"
    assert re.search(r"^make test +# ", text, re.M), "the README's second command"
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{doc.name}" in text, f"docs/{doc.name} is not linked from the README"
    assert "(bench/results/README.md)" in text
    for png in sorted((ROOT / "docs").glob("*.png")):
        assert f"(docs/{png.name})" in text, f"the tour does not show docs/{png.name}"


def test_readme_documents_every_setting() -> None:
    """The configuration table names every ``WAP_*`` variable ``Settings`` reads (and ``WAP_CONFIG``)."""
    from wap_core.config import _ENV

    text = README.read_text(encoding="utf-8")
    missing = [var for var in [*_ENV.values(), "WAP_CONFIG"] if f"`{var}`" not in text]
    assert missing == [], "settings missing from the README's configuration table"


# ----- the architecture diagram matches the tree and the layer contract -----------------------------


def _diagram() -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """The mermaid diagram of docs/architecture.md: its nodes (id -> label lines) and edges (upper, lower)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = re.search(r"```mermaid\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no mermaid diagram"
    nodes = {
        node: label.split("<br/>")
        for node, label in re.findall(r'^\s*(\w+)\["([^"]+)"\]\s*$', block.group(1), re.M)
    }
    edges = re.findall(r"^\s*(\w+)\s*-->\s*(\w+)\s*$", block.group(1), re.M)
    return nodes, edges


ONE_PER_TYPE = "one module per check type"
ONE_PER_ACTION = "one module per action"  # wap_core/actions/: a new action is not drawn one by one


def _names(line: str) -> set[str]:
    """The module names a module line of a label lists (``a · b · c/``)."""
    tokens = [t.strip() for t in line.split("·")]
    bad = [t for t in tokens if t not in (ONE_PER_TYPE, ONE_PER_ACTION) and not re.fullmatch(r"\w+/?", t)]
    assert not bad, f"not module names in the diagram: {bad}"
    return {t for t in tokens if t not in (ONE_PER_TYPE, ONE_PER_ACTION)}


def _tree(package: Path) -> set[str]:
    modules = {p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")}
    folders = {f"{d.name}/" for d in package.iterdir() if d.is_dir() and d.name != "__pycache__"}
    return modules | folders


def _drawn_modules(lines: list[str]) -> list[str]:
    """The dotted wap_core modules a node stands for ([] for app.py and pages/, outside the core)."""
    core = ROOT / "wap_core"
    head = lines[0]
    if head == "base modules":
        return [f"wap_core.{n}" for line in lines[1:] for n in _names(line)]
    out = []
    for part in (p.strip() for p in head.split("+")):
        if part.endswith(".py") and (core / part).is_file():  # a module: lakehouse.py, security/access.py
            out.append("wap_core." + part[:-3].replace("/", "."))
        elif part.endswith("/") and (core / part).is_dir():  # a package: its modules on the next line
            assert len(lines) > 1, f"the diagram's {part} lists no modules"
            out += [f"wap_core.{part[:-1]}.{n}" for n in _names(lines[1]) if not n.endswith("/")]
            out += [f"wap_core.{part[:-1]}.{n[:-1]}/" for n in _names(lines[1]) if n.endswith("/")]
            out.append(f"wap_core.{part[:-1]}")
        else:
            assert (ROOT / part).exists(), (
                f"the diagram names {part!r}, which is neither in wap_core nor in the repo"
            )
    return out


def test_architecture_diagram_matches_the_tree() -> None:
    """Every package and module of wap_core is drawn (a check type may hide behind "one module per check
    type"), and nothing is drawn that does not exist."""
    core = ROOT / "wap_core"
    nodes, _ = _diagram()
    drawn = {m for lines in nodes.values() for m in _drawn_modules(lines)}
    packages = {d.name for d in core.iterdir() if (d / "__init__.py").is_file()}
    assert {
        m.split(".")[1] for m in drawn if m.count(".") >= 1 and (core / m.split(".")[1]).is_dir()
    } == packages
    hidden = {
        lines[0][:-1]
        for lines in nodes.values()
        if len(lines) > 1 and (ONE_PER_TYPE in lines[1] or ONE_PER_ACTION in lines[1])
    }  # packages whose per-type modules need not be named
    actual = {p.stem for p in core.glob("*.py") if p.stem not in ("__init__", "__main__")}
    actual = {f"wap_core.{m}" for m in actual}
    for pkg in packages:
        actual.add(f"wap_core.{pkg}")
        actual |= {
            f"wap_core.{pkg}.{n[:-1]}/" if n.endswith("/") else f"wap_core.{pkg}.{n}"
            for n in _tree(core / pkg)
        }
    assert drawn - actual == set(), "drawn but not in wap_core"
    missing = {m for m in actual - drawn if not any(m.startswith(f"wap_core.{h}.") for h in hidden)}
    assert missing == set(), "in wap_core but not drawn in docs/architecture.md"


def test_architecture_diagram_follows_the_layer_contract() -> None:
    """Every node lies in one layer of tests/test_architecture.py's LAYERS, and every arrow points from a
    layer to a lower one, so the picture cannot say another order than the contract the suite enforces."""
    import test_architecture

    nodes, edges = _diagram()
    assert edges, "the diagram draws no arrow"

    def layer(node: str) -> int:
        modules = [m.rstrip("/") for m in _drawn_modules(nodes[node]) if not m.endswith("/")]
        layers = {test_architecture.layer_of(m) for m in modules if m in test_architecture.MODULES}
        assert len(layers) <= 1, f"node {node} spans layers {sorted(layers)}: draw one node per layer"
        return layers.pop() if layers else -1  # app.py and pages/ sit above the core

    for upper, lower in edges:
        assert upper in nodes and lower in nodes, f"arrow {upper} --> {lower} between unknown nodes"
        assert layer(upper) < layer(lower), f"arrow {upper} --> {lower} points up the layers"
    drawn_layers = {layer(n) for n in nodes} - {-1}
    assert drawn_layers == set(range(len(test_architecture.LAYERS))), "a layer of the contract is not drawn"
