"""The docs point at files and headings that exist, and config headers stay short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
MAX_HEADER_LINES = 12  # STYLE.md 14: what it trains, for which machine, the command, one result

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CODE_PATH = re.compile(
    r"`((?:bench|callbacks|configs|docs|examples|tests|unilab_lit)/[\w./-]+\.\w+)`"
)
_FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (shell examples name files they create)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and not line.startswith("    "):
            kept.append(line)
    return "\n".join(kept)


def anchors(text: str) -> set[str]:
    """The heading anchors GitHub gives ``text``'s headings (duplicates get ``-1``, ``-2``)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(text).splitlines():
        heading = re.match(r"#{1,6} (.*)", line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_doc_links_resolve_to_files_and_headings(page: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # an external address
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no {dest.relative_to(ROOT)}")
        elif anchor and anchor not in anchors(dest.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{_page_id(page)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_doc_code_paths_exist(page: Path) -> None:
    missing = [p for p in _CODE_PATH.findall(_prose(page.read_text())) if not (ROOT / p).exists()]
    assert not missing, f"{_page_id(page)} names files that do not exist: {missing}"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_config_header_at_most_twelve_lines(config: Path) -> None:
    header = 0
    for line in config.read_text().splitlines():
        if not line.startswith("#"):
            break
        header += 1
    assert 0 < header <= MAX_HEADER_LINES, (
        f"{config.name}: a header of {header} comment lines; keep it to {MAX_HEADER_LINES} "
        "(what, machine, command, one dated result) and put measurements in docs/benchmarks.md"
    )
