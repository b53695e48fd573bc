"""fedmm across separate processes: a SuperLink and one SuperNode per client, talking over the network.

Each query starts a process per client and Flower polls every 3 seconds, so FedGrEM's defaults take
minutes (``fedmm.flower.processes``): behind ``-m slow``. CI runs the TLS case (``.ci/run``).
"""

import sys

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("cryptography")

import joblib  # noqa: E402

from fedmm import FederatedGaussianMixture  # noqa: E402
from fedmm.flower.processes import LocalDeployment  # noqa: E402
from fedmm.simulate import make_federated_gmm  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes in /proc")]


@pytest.mark.parametrize("tls", [pytest.param(True, id="tls"), pytest.param(False, id="insecure")])
def test_separate_processes_fit_without_a_supernode_killed_mid_fit(tmp_path, tls):
    """FedGrEM's defaults through ``flwr run`` with every party a process of its own. One SuperNode is
    killed (SIGKILL) once the rounds have begun: the server leaves that client out and fits the others,
    the same fit as in one process on their rows; every process started, and every process they started,
    is gone at the end."""
    X, _ = make_federated_gmm(3, 100, random_state=0)
    paths = [tmp_path / f"client-{k}.npz" for k in range(3)]
    for path, rows in zip(paths, X):
        np.savez(path, X=rows)
    out = tmp_path / "model.joblib"
    lines, started = [], {}

    def watch(line):
        lines.append(line)
        # The first round of the first run (the trimmed pooled start's): the fit is under way.
        if "step" in line and "fedmm.flower: query" in line and not started.get("killed"):
            deployment.kill("supernode-2")
            started["killed"] = True

    with LocalDeployment(tmp_path / "deployment", paths, tls=tls) as deployment:
        started.update({name: p.pid for name, p in deployment.processes.items()})
        running = set(deployment.alive())
        assert {started["superlink"], started["supernode-0"]} <= running
        deployment.run({"out": str(out), "timeout": 20, "min-clients": 2, "progress": True}, on_line=watch,
                       timeout=2400)
    assert started.get("killed"), "the rounds never began:\n" + "\n".join(lines[-30:])
    assert deployment.alive() == []
    for name, process in deployment.processes.items():
        assert process.poll() is not None, name

    remote = joblib.load(out)
    # Client 2 (by its client-id) is left out; the fit is the in-process one on the other two.
    np.testing.assert_array_equal(remote.client_ids_, [0, 1])
    assert any(r.reason == "no reply in time" for r in remote.flower_rejections_)
    ref = FederatedGaussianMixture(5, random_state=0).fit(X[:2])
    np.testing.assert_allclose(remote.means_, ref.means_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(remote.weights_, ref.weights_, rtol=0, atol=1e-8)
