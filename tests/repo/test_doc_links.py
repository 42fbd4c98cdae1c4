"""No dead link in the documentation a reader meets.

Every relative link in README.md, CHANGELOG.md, docs/, chart/README.md and e2e/README.md names a
file or directory of this repository, and its `#anchor` a heading of the target page
under GitHub's anchor rules (lower case; punctuation dropped, letters, digits, `-`
and `_` kept; spaces become `-`; a repeated heading gets `-1`, `-2`, ...). Links
into this repository by absolute URL (`https://github.com/<owner>/aicr-runner/blob/
main/...`, as chart/README.md must write them: Artifact Hub shows that page outside
the repository) are held to the same rules against this checkout. Links inside code
are not links.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGES = (
    ROOT / "README.md",
    ROOT / "chart" / "README.md",
    ROOT / "e2e" / "README.md",
    ROOT / "CHANGELOG.md",
    *sorted((ROOT / "docs").glob("*.md")),
)
#: The repository's own address (Chart.yaml `home`); absolute links under it are checked too.
HOME = yaml.safe_load((ROOT / "chart" / "Chart.yaml").read_text())["home"].rstrip("/")
REPO_URL = re.compile(re.escape(HOME) + r"/(?:blob|tree)/main/(?P<path>[^#?]*)(?P<anchor>#.*)?$")

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$")
_INLINE_CODE = re.compile(r"(`+)(?P<code>(?:(?!\n[ \t]*\n).)+?)\1", re.S)
_LINK = re.compile(r"!?\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<target>[^)\s]*)(?:\s+\"[^\"]*\")?\)")
_AUTOLINK = re.compile(r"<(?P<target>https?://[^>\s]+)>")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"(?P<id>[^\"]+)\"", re.I)


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.target}"


def prose(text: str) -> str:
    """The page with its fenced code blocks and inline code blanked out, line breaks kept
    (a link's text may wrap onto the next line)."""
    kept: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            kept.append("")
            continue
        if opened:
            fence = opened.group(1)
        kept.append("" if opened else line)
    return _INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), "\n".join(kept))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (github-slugger, without the duplicate suffix)."""
    text = _INLINE_CODE.sub(lambda m: m.group("code"), heading)
    text = _LINK.sub(lambda m: m.group("text"), text)
    text = re.sub(r"<[^>]+>", "", text).replace("*", "")
    return "".join(c for c in text.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page offers: its headings' slugs, numbered when repeated, and HTML anchors."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fence: str | None = None
    for line in text.splitlines():
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        found.update(m.group("id") for m in _HTML_ANCHOR.finditer(line))
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading.group("text"))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[Link]:
    text = prose(page.read_text())
    return [
        Link(page, text.count("\n", 0, match.start()) + 1, match.group("target"))
        for match in sorted((*_LINK.finditer(text), *_AUTOLINK.finditer(text)), key=lambda m: m.start())
    ]


def problem(link: Link, root: Path = ROOT) -> str | None:
    """Why ``link`` is dead, or None. External links other than this repository's are not followed."""
    target = link.target
    in_repo = REPO_URL.match(target)
    if in_repo:
        path, anchor = in_repo.group("path"), (in_repo.group("anchor") or "")
        resolved = root / path
    elif re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None  # another site, mailto:
    else:
        path, _, fragment = target.partition("#")
        anchor = f"#{fragment}" if fragment else ""
        resolved = (link.page.parent / path) if path else link.page
    resolved = resolved.resolve()
    if not resolved.is_relative_to(root.resolve()):
        return f"{target} leaves the repository"
    if not resolved.exists():
        return f"{target}: no such file"
    if anchor:
        if resolved.suffix != ".md":
            return f"{target}: an anchor into a page that is not Markdown"
        if anchor[1:] not in anchors(resolved.read_text()):
            return f"{target}: {resolved.name} has no heading for {anchor}"
    return None


# -- the rules, on pages made for the purpose ------------------------------------------------------


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Which criteria?", "which-criteria"),
        ("What ran with the real aicr, and which version", "what-ran-with-the-real-aicr-and-which-version"),
        ("Fixtures (`e2e/conftest.py`)", "fixtures-e2econftestpy"),
        ("The stand-in kubelet: what is real and what is not", "the-stand-in-kubelet-what-is-real-and-what-is-not"),
        ("`job.ttlSecondsAfterFinished` and AICR_RUNNER_X", "jobttlsecondsafterfinished-and-aicr_runner_x"),
        ("fetch → pack ≥ 2", "fetch--pack--2"),
        ("See [the docs](docs/x.md) **now**", "see-the-docs-now"),
    ],
)
def test_slugs_follow_github(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_repeated_headings_are_numbered_and_code_blocks_are_not_headings() -> None:
    text = "# Title\n## Time\n### Time\n```bash\n# 1. not a heading\n```\n## Time\n"
    assert anchors(text) == {"title", "time", "time-1", "time-2"}


def test_dead_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Page\n\n## Real section\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/page.md#real-section) [self](#readme) [gone](docs/missing.md)\n"
        "[bad anchor](docs/page.md#no-such) `[in code](nowhere.md)` <https://example.com/x> [a wrapped\n"
        "link](docs/page.md#wrong)\n"
        "```\n[in a block](nowhere.md)\n```\n# Readme\n[up](../../outside.md)\n"
    )
    found = {link.target: problem(link, tmp_path) for link in links(page)}
    assert found == {
        "docs/page.md#real-section": None,
        "#readme": None,
        "docs/missing.md": "docs/missing.md: no such file",
        "docs/page.md#no-such": "docs/page.md#no-such: page.md has no heading for #no-such",
        "https://example.com/x": None,
        "docs/page.md#wrong": "docs/page.md#wrong: page.md has no heading for #wrong",
        "../../outside.md": "../../outside.md leaves the repository",
    }


def test_absolute_links_into_this_repository_are_checked_against_the_checkout() -> None:
    page = ROOT / "chart" / "README.md"
    alive = Link(page, 1, f"{HOME}/blob/main/docs/installing.md#permissions")
    dead = Link(page, 1, f"{HOME}/blob/main/docs/installing.md#no-such-section")
    assert problem(alive) is None
    assert problem(dead) == f"{dead.target}: installing.md has no heading for #no-such-section"


# -- the real pages --------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_dead_link(page: Path) -> None:
    dead = [f"{link}: {why}" for link in links(page) if (why := problem(link)) is not None]
    assert dead == []


def test_the_chart_readme_has_no_relative_link() -> None:
    """Artifact Hub renders chart/README.md away from the repository: a relative link there is dead."""
    relative = [
        str(link)
        for link in links(ROOT / "chart" / "README.md")
        if not link.target.startswith("#") and not re.match(r"^[a-z][a-z0-9+.-]*:", link.target)
    ]
    assert relative == []


def test_every_page_is_reachable_from_the_readme() -> None:
    """The README is the front door: every other page is one link away."""
    readme = ROOT / "README.md"
    targets = {(ROOT / link.target.partition("#")[0]).resolve() for link in links(readme)}
    assert [str(p.relative_to(ROOT)) for p in PAGES if p != readme and p.resolve() not in targets] == []
