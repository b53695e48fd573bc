"""Every Python code block of README.md and docs/*.md runs alone, as a newcomer copies it.

Each block runs in a fresh interpreter (``python -c``, or a fork of one that has imported fedmm, :data:`SERVER`)
in a temporary folder: it must carry its own imports.
A block whose leading comments say ``# continues the block above`` (or ``blocks``) runs as one program with
the block before it (and that block's predecessors, if it continues one too). A block that needs an extra says so in a leading
comment naming it, ``# needs: pip install "fedmm[privacy]"``, and is skipped where the extra's package is
missing. The research record (docs/research/) is not run: its code is as it was measured.

The blocks run in parallel, one interpreter per chain on every core, once per session: a chain runs up to its
last block whose extras are installed, so a block that others continue is tested with them, in one run. Each
test reads its chain's outcome.
"""

import importlib.util
import json
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


def _env():
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)   # this checkout's fedmm
    return {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg"}


def _run(program, folder):
    folder.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run([sys.executable, "-c", program], cwd=folder, env=_env(), capture_output=True,
                              text=True, timeout=TIMEOUT)
        return done.returncode, done.stderr[-3000:]
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT} s"


#: A fork server (POSIX): one fresh interpreter imports what every block imports, once, and forks a child per
#: block, which runs it as ``python -c`` would (its own ``__main__``, the folder its working directory, its
#: output to a file). The child starts as a fresh interpreter that has imported those modules: a block still
#: needs its own imports (its names are its own). The server runs no kernel before it forks, so it has no
#: threads to break in the children. Forty-odd interpreters importing fedmm were about a third of the blocks'
#: time.
SERVER = r"""
import builtins, json, os, signal, sys, time, traceback, types, warnings
warnings.simplefilter("ignore")
import numpy, scipy.stats, sklearn.base, fedmm  # noqa: F401
jobs, running, limit, workers = json.load(sys.stdin), {}, float(sys.argv[1]), int(sys.argv[2])

def start(key, program, folder):
    os.makedirs(folder, exist_ok=True)
    out = os.path.join(folder, ".output")
    sys.stdout.flush()
    pid = os.fork()
    if pid:
        running[pid] = (key, out, time.monotonic())
        return
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(folder)
    sys.argv, main = ["-c"], types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    code = 0
    try:
        exec(compile(program, "<string>", "exec"), main.__dict__)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

while jobs or running:
    while jobs and len(running) < workers:
        start(*jobs.pop(0))
    pid, status = os.waitpid(-1, os.WNOHANG)
    if not pid:
        for child, (key, out, began) in running.items():
            if time.monotonic() - began > limit:
                os.kill(child, signal.SIGKILL)
        time.sleep(0.02)
        continue
    key, out, _ = running.pop(pid)
    with open(out) as f:
        text = f.read()[-3000:]
    code = os.waitstatus_to_exitcode(status)
    print(json.dumps([key, code, text if code != -9 else f"timed out after {limit:g} s"]), flush=True)
"""


def _run_all(runs, base):
    """``{key: (return code, output)}`` of every ``(key, program)``, run in parallel on every core: by the fork
    server where the system forks, else one ``python -c`` each."""
    folders = {key: base / f"{key[0][:-3]}-{key[1]}" for key in runs}
    if not hasattr(os, "fork"):
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            futures = {key: pool.submit(_run, program, folders[key]) for key, program in runs.items()}
            return {key: future.result() for key, future in futures.items()}
    jobs = [[list(key), program, str(folders[key])] for key, program in runs.items()]
    done = subprocess.run([sys.executable, "-c", SERVER, str(TIMEOUT), str(os.cpu_count() or 1)],
                          input=json.dumps(jobs), env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT * len(jobs))
    results = {tuple(key): (code, text) for key, code, text in map(json.loads, done.stdout.splitlines())}
    return {key: results.get(key, (-1, f"the fork server ended: {done.stderr[-3000:]}")) for key in runs}


def _missing(extras):
    return [e for e in extras if importlib.util.find_spec(EXTRAS.get(e, e)) is None]


@pytest.fixture(scope="session")
def outcomes(tmp_path_factory):
    """``{(page, first): (last, return code, output)}``: each chain run up to its last block whose extras are
    installed, in parallel on every core."""
    runs = {}
    for page, i, program, extras, first in CASES:
        if not _missing(extras):
            runs[(page.name, first)] = (i, program)      # a later block of the chain replaces an earlier one
    results = _run_all({(page, first): program for (page, first), (_, program) in runs.items()},
                       tmp_path_factory.mktemp("docs"))
    return {key: (last, *results[key]) for key, (last, _) in runs.items()}


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


def test_each_block_runs_alone_in_its_fork(tmp_path):
    """The fork server's children start with fedmm imported but nothing named: a block without its imports
    fails; an exit code, an exception and a block's output come back; a block leaves nothing to the next."""
    runs = {("a.md", 0): "print(np.zeros(2))", ("a.md", 1): "import sys\nprint('out')\nsys.exit(3)",
            ("a.md", 2): "import fedmm\nfedmm.LEFT = 1\nraise ValueError('boom')",
            ("a.md", 3): "import fedmm\nassert not hasattr(fedmm, 'LEFT')\nopen('here', 'w').write('x')"}
    results = _run_all(runs, tmp_path)
    assert results[("a.md", 0)][0] == 1 and "NameError" in results[("a.md", 0)][1]
    assert results[("a.md", 1)] == (3, "out\n")
    assert results[("a.md", 2)][0] == 1 and "ValueError: boom" in results[("a.md", 2)][1]
    assert results[("a.md", 3)][0] == 0 and (tmp_path / "a-3" / "here").exists()
