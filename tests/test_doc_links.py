"""Every relative link of README.md and docs/ reaches a file, and every anchor a heading of it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped but hyphens, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def links():
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in LINK.findall(text):
            if not re.match(r"[a-z]+:", target):
                yield page, target


CASES = list(links())


@pytest.mark.parametrize("page, target", CASES, ids=[f"{p.relative_to(ROOT)}->{t}" for p, t in CASES])
def test_a_link_reaches_its_file_and_heading(page, target):
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    assert file.exists(), f"{page.relative_to(ROOT)}: {target} does not exist"
    if anchor and file.suffix == ".md":
        assert anchor in anchors(file), f"{page.relative_to(ROOT)}: no heading #{anchor} in {path or page.name}"
