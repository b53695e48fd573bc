"""Every Python code block of README.md and docs/*.md runs alone, as a newcomer copies it.

Each block runs in a fresh interpreter (``python -c``) in a temporary folder: it must carry its own imports.
A block whose leading comments say ``# continues the block above`` (or ``blocks``) runs as one program with
the block before it (and that block's predecessors, if it continues one too). A block that needs an extra says so in a leading
comment naming it, ``# needs: pip install "fedmm[privacy]"``, and is skipped where the extra's package is
missing. The research record (docs/research/) is not run: its code is as it was measured.

The blocks run in parallel, one interpreter per chain on every core, once per session: a chain runs up to its
last block whose extras are installed, so a block that others continue is tested with them, in one run. Each
test reads its chain's outcome.
"""

import importlib.util
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
CONTINUES = re.compile(r"\A(?:#.*\n)*# continues the blocks? above", re.M)
NEEDS = re.compile(r"\A(?:#.*\n)*#[^\n]*needs[^\n]*fedmm\[([\w,]+)\]", re.M)
EXTRAS = {"privacy": "dp_accounting", "flower": "flwr", "plot": "matplotlib", "gpu": "cupy",
          "dask": "distributed", "ray": "ray", "pfl": "pfl"}
USES = {"flower": r"\bfedmm\.flower\b|\bflwr\b", "privacy": r"\bfedmm\.privacy\b",
        "plot": r"\bmatplotlib\b|\bplot_study\b", "gpu": r"\bcupy\b"}   # what shows a block needs an extra
TIMEOUT = 240


def programs():
    """(page, index, program, extras, first) for every block: a continuing block carries what it continues;
    ``first`` is the index of its chain's first block."""
    for page in PAGES:
        chains = []
        for i, code in enumerate(BLOCK.findall(page.read_text())):
            if CONTINUES.match(code) and chains:
                chains[-1].append((i, code))
            else:
                chains.append([(i, code)])
        for chain in chains:
            for n, (i, _) in enumerate(chain):
                codes = [c for _, c in chain[:n + 1]]
                extras = {e for c in codes for m in NEEDS.findall(c) for e in m.split(",")}
                yield page, i, "\n".join(codes), sorted(extras), chain[0][0]


CASES = list(programs())


def _run(program, folder):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)   # this checkout's fedmm
    env = {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg"}
    folder.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run([sys.executable, "-c", program], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT)
        return done.returncode, done.stderr[-3000:]
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT} s"


def _missing(extras):
    return [e for e in extras if importlib.util.find_spec(EXTRAS.get(e, e)) is None]


@pytest.fixture(scope="session")
def outcomes(tmp_path_factory):
    """``{(page, first): (last, return code, stderr)}``: each chain run up to its last block whose extras are
    installed, in parallel on every core."""
    base = tmp_path_factory.mktemp("docs")
    runs = {}
    for page, i, program, extras, first in CASES:
        if not _missing(extras):
            runs[(page.name, first)] = (i, program)      # a later block of the chain replaces an earlier one
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        futures = {key: (last, pool.submit(_run, program, base / f"{key[0][:-3]}-{last}"))
                   for key, (last, program) in runs.items()}
        return {key: (last, *future.result()) for key, (last, future) in futures.items()}


def test_the_guide_has_blocks():
    assert len(CASES) >= 10


def test_the_markers_are_read():
    assert CONTINUES.match("# continues the block above\nx = 1\n")
    assert CONTINUES.match('# needs: pip install "fedmm[flower]"\n# continues the block above\n')
    assert CONTINUES.match("# continues the blocks above; needs the flower extra\n")
    assert not CONTINUES.match("x = 1\n# continues the block above\n")
    assert NEEDS.match('# needs: pip install "fedmm[privacy,flower]"\nx = 1\n').group(1) == "privacy,flower"


@pytest.mark.parametrize("page, index, program, extras, first", CASES, ids=[f"{c[0].name}[{c[1]}]" for c in CASES])
def test_a_block_names_the_extras_it_needs(page, index, program, extras, first):
    code = "\n".join(line for line in program.splitlines() if not line.lstrip().startswith("#"))
    needed = {extra for extra, pattern in USES.items() if re.search(pattern, code)}
    assert needed <= set(extras), (f"{page.name}, block {index} uses the extra(s) {sorted(needed - set(extras))}: "
                                   f'its first lines should say so, e.g. # needs: pip install "fedmm[{",".join(sorted(needed))}]"')


@pytest.mark.parametrize("page, index, program, extras, first", CASES, ids=[f"{c[0].name}[{c[1]}]" for c in CASES])
def test_a_block_runs_alone(page, index, program, extras, first, outcomes):
    missing = _missing(extras)
    if missing:
        pytest.skip(f"needs the extra(s) {missing}")
    last, code, stderr = outcomes[(page.name, first)]
    where = f"block {index}" if last == index else f"block {index}, with blocks to {last} that continue it,"
    assert code == 0, f"{page.name}, {where} fail in a fresh interpreter:\n{stderr}\n--- the program:\n{program}"
