"""``fedmm flower-demo``: the paper's GMM (or MoR) design over simulated Flower clients, through ``flwr run``.

Writes each client's rows to its own file, a Flower app project that names
:mod:`fedmm.flower.app`'s ``ServerApp`` and ``ClientApp``, and a Flower configuration with a
local-simulation connection; runs ``flwr run`` (flwr's simulation runtime: one SuperNode per client
on Ray) and reads the fitted estimator back. Then it fits the same estimator in this process and
prints both errors per client and their largest difference: the same numbers, to the last bits.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import joblib
import numpy as np

from ..estimators import get_model
from ..metrics import estimation_errors
from ..privacy import as_under_secure_aggregation
from .app import PYPROJECT, estimator_from_config
from .processes import LocalDeployment

__all__ = ["flower_demo"]

FLOWER_CONFIG = """[superlink]
default = "local-simulation"

[superlink.local-simulation]
address = ":local:"
"""


def flower_demo(n_clients=10, n_samples=150, method="fedgrem", workdir=None, random_state=0, timeout=None,
                model="gmm", processes=False, tls=False, privacy=None):
    """Run the demo (see the module docstring) on the simulation of ``model`` (``"gmm"`` or ``"mor"``: the paper's
    design, App. B.1; :func:`fedmm.estimators.simulated_models`); returns ``(flower_model, in_process_model, truth)``.

    With ``processes``, every party is an operating-system process of its own on this machine (a SuperLink
    and a SuperNode per client, :class:`fedmm.flower.processes.LocalDeployment`; over HTTPS under a
    certificate authority made for the run with ``tls``), and the server prints a line per query. Clients
    number 5 or more: the last is an outlier (fewer, and one client would be a third of them or more).
    ``timeout`` (seconds) defaults to 600, 3600 with ``processes``. ``privacy``: the arguments of a
    :class:`fedmm.privacy.DifferentialPrivacy` (a dict) for a private fit, its rounds under SecAgg+.
    """
    work = Path(workdir or tempfile.mkdtemp(prefix="fedmm-flower-"))
    (work / "data").mkdir(parents=True, exist_ok=True)
    make = get_model(model).simulation.make
    outliers = [n_clients - 1] if n_clients >= 5 else []
    *data, truth = make(n_clients, n_samples, outlier_clients=outliers, random_state=random_state)
    paths = [work / "data" / f"client-{k}.npz" for k in range(n_clients)]
    for path, rows in zip(paths, zip(*data)):
        np.savez(path, **dict(zip(("X", "y"), rows)))
    out = work / "model.joblib"
    run_config = {"model": model, "method": method, "init": "auto", "random-state": random_state,
                  **({"privacy": json.dumps(privacy)} if privacy else {})}
    where = "separate processes" + (" over TLS" if tls else "") if processes else "simulated clients"
    print(f"fedmm flower-demo: {n_clients} clients ({where}, {len(outliers)} an outlier), {model}, {method}, "
          f"in {work}", flush=True)
    start = time.perf_counter()
    if processes:
        with LocalDeployment(work / "deployment", paths, tls=tls) as deployment:
            deployment.run({**run_config, "out": str(out), "progress": True}, timeout=timeout or 3600,
                           on_line=_print_fedmm_lines)
    else:
        _simulate(work, out, run_config, n_clients, timeout or 600)
    elapsed = time.perf_counter() - start
    remote = joblib.load(out)
    # A private fit's rounds under SecAgg+ clip every coordinate of an update: the in-process fit does the same.
    secure = privacy and privacy.get("noise", "central") == "central"
    with as_under_secure_aggregation() if secure else contextlib.nullcontext():
        local = estimator_from_config(run_config).fit(*data)

    def theta(est):
        """The fitted components, regression coefficients without the intercept."""
        return est.params_.theta[..., :truth.theta.shape[-1]]

    honest = ~truth.outliers
    err_remote = estimation_errors(remote.weights_, theta(remote), truth.weights, truth.theta)[1]
    err_local = estimation_errors(local.weights_, theta(local), truth.weights, truth.theta)[1]
    print(f"flwr run: {elapsed:.0f} s, {remote.n_iter_} rounds, replies rejected: {len(remote.flower_rejections_)}")
    print("\n| client | error on Flower | error in one process |\n|---|---|---|")
    for k in range(n_clients):
        note = " (outlier)" if truth.outliers[k] else ""
        print(f"| {remote.client_ids_[k]}{note} | {err_remote[k]:.4f} | {err_local[k]:.4f} |")
    print(f"\nlargest error over honest clients: {err_remote[honest].max():.4f} on Flower, "
          f"{err_local[honest].max():.4f} in one process; largest difference of the parameters: "
          f"{np.abs(theta(remote) - theta(local)).max():.2e}")
    return remote, local, truth


def _print_fedmm_lines(line):
    """The server's lines among ``flwr run``'s output (one per query, :mod:`fedmm.flower.server`)."""
    if "fedmm.flower" in line:
        print(line[line.index("fedmm.flower"):], flush=True)


def _simulate(work, out, run_config, n_clients, timeout):
    """``flwr run`` in flwr's simulation runtime: one SuperNode per client on Ray, in a local SuperLink."""
    (work / "app").mkdir(exist_ok=True)
    (work / "home").mkdir(exist_ok=True)
    (work / "app" / "pyproject.toml").write_text(PYPROJECT)
    (work / "home" / "config.toml").write_text(FLOWER_CONFIG)
    out.unlink(missing_ok=True)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "FLWR_HOME": str(work / "home"), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    overrides = " ".join([f"out='{out}'", f"data-dir='{work / 'data'}'", f"method='{run_config['method']}'",
                          f"model='{run_config['model']}'", f"random-state={run_config['random-state']}"]
                         + ([f"privacy='{run_config['privacy']}'"] if "privacy" in run_config else []))
    command = [str(bin_dir / "flwr"), "run", str(work / "app"), "local-simulation", "--stream",
               "--run-config", overrides, "--federation-config", f"num-supernodes={n_clients}"]
    try:
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        _stop_local_superlink(work / "home")
    if run.returncode != 0 or not out.exists():
        raise RuntimeError(f"flwr run failed (exit {run.returncode}); its last output:\n"
                           + (run.stdout + run.stderr)[-3000:])


def _stop_local_superlink(home):
    """Stop the local SuperLink ``flwr run`` started for ``home`` (it outlives the run; Linux's /proc)."""
    marker = str(home / "local-superlink").encode()
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(int(pid), signal.SIGTERM)
        except (OSError, ProcessLookupError):
            continue
