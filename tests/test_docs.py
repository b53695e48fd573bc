"""Every Python code block of README.md and docs/ runs (issue 12): what a newcomer copies must work.

The blocks of one page run in order in one namespace, as a reader runs them, in a temporary folder.
Pages run with few rounds where they ask for studies: the point is that the code runs, not its numbers.
"""

import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def blocks(page):
    return BLOCK.findall(page.read_text())


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: p.name)
def test_every_code_block_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, code in enumerate(blocks(page)):
            try:
                exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
            except Exception as err:
                pytest.fail(f"{page.name}, block {i} fails: {type(err).__name__}: {err}\n{code}")
