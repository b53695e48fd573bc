"""``fedmm flower-demo``: the paper's GMM (or MoR) design over simulated Flower clients, through ``flwr run``.

Writes each client's rows to its own file, a Flower app project that names
:mod:`fedmm.flower.app`'s ``ServerApp`` and ``ClientApp``, and a Flower configuration with a
local-simulation connection; runs ``flwr run`` (flwr's simulation runtime: one SuperNode per client
on Ray) and reads the fitted estimator back. Then it fits the same estimator in this process and
prints both errors per client and their largest difference: the same numbers, to the last bits.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import joblib
import numpy as np

from ..metrics import estimation_errors
from ..simulate import make_federated_gmm, make_federated_mor
from .app import estimator_from_config

__all__ = ["flower_demo"]

PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedmm-flower-demo"
version = "1.0.0"
description = "fedmm's Flower demo"
license = "BSD-3-Clause"
# fedmm itself comes from the environment that runs flwr (flwr run installs the rest in isolation).
dependencies = ["flwr[simulation]>=1.41"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "fedmm"

[tool.flwr.app.components]
serverapp = "fedmm.flower.app:server"
clientapp = "fedmm.flower.app:client"

# Every key the run config may override (fedmm.flower.app's table), with its default.
[tool.flwr.app.config]
out = "model.joblib"
data-dir = "data"
model = "gmm"
n-components = 5
method = "fedgrem"
init = "auto"
random-state = 0
settings = "{}"
timeout = 0
min-clients = 1
"""

FLOWER_CONFIG = """[superlink]
default = "local-simulation"

[superlink.local-simulation]
address = ":local:"
"""


def flower_demo(n_clients=10, n_samples=150, method="fedgrem", workdir=None, random_state=0, timeout=600,
                model="gmm"):
    """Run the demo (see the module docstring) on the paper's ``model`` design (``"gmm"`` or ``"mor"``,
    App. B.1); returns ``(flower_model, in_process_model, truth)``."""
    work = Path(workdir or tempfile.mkdtemp(prefix="fedmm-flower-"))
    (work / "data").mkdir(parents=True, exist_ok=True)
    (work / "app").mkdir(exist_ok=True)
    (work / "home").mkdir(exist_ok=True)
    make = make_federated_gmm if model == "gmm" else make_federated_mor
    *data, truth = make(n_clients, n_samples, outlier_clients=[n_clients - 1], random_state=random_state)
    for k, rows in enumerate(zip(*data)):
        np.savez(work / "data" / f"client-{k}.npz", **dict(zip(("X", "y"), rows)))
    (work / "app" / "pyproject.toml").write_text(PYPROJECT)
    (work / "home" / "config.toml").write_text(FLOWER_CONFIG)
    out = work / "model.joblib"
    out.unlink(missing_ok=True)
    run_config = {"model": model, "method": method, "init": "auto", "random-state": random_state}
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "FLWR_HOME": str(work / "home"), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    overrides = " ".join([f"out='{out}'", f"data-dir='{work / 'data'}'", f"method='{method}'", f"model='{model}'",
                          f"random-state={random_state}"])
    command = [str(bin_dir / "flwr"), "run", str(work / "app"), "local-simulation", "--stream",
               "--run-config", overrides, "--federation-config", f"num-supernodes={n_clients}"]
    print(f"fedmm flower-demo: {n_clients} simulated clients (one an outlier), {model}, {method}, in {work}",
          flush=True)
    start = time.perf_counter()
    try:
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        _stop_local_superlink(work / "home")
    if run.returncode != 0 or not out.exists():
        raise RuntimeError(f"flwr run failed (exit {run.returncode}); its last output:\n"
                           + (run.stdout + run.stderr)[-3000:])
    elapsed = time.perf_counter() - start
    remote = joblib.load(out)
    local = estimator_from_config(run_config).fit(*data)
    theta = (lambda est: est.means_) if model == "gmm" else (lambda est: est.coef_)
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


def _stop_local_superlink(home):
    """Stop the local SuperLink ``flwr run`` started for ``home`` (it outlives the run; Linux's /proc)."""
    marker = str(home / "local-superlink").encode()
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(int(pid), signal.SIGTERM)
        except (OSError, ProcessLookupError):
            continue
