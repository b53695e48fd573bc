"""fedmm across separate processes: a SuperLink and one SuperNode per client, talking over the network.

Each query starts a process per client and Flower polls every 3 seconds, so a fit takes minutes
(``fedmm.flower.processes``): behind ``-m slow``. CI runs the TLS case (``.ci/run``); the default run
checks the certificates it uses.
"""

import socket
import ssl
import sys
import threading

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("cryptography")

import joblib  # noqa: E402

from fedmm import FederatedGaussianMixture  # noqa: E402
from fedmm.flower.processes import HOST, LocalDeployment, self_signed_certificates  # noqa: E402
from fedmm.simulate import make_federated_gmm  # noqa: E402

def _handshake(server_files, trusted_ca):
    """A TLS handshake between a server holding ``server_files`` (certificate, key) and a client that trusts
    ``trusted_ca`` and checks the name 127.0.0.1; the error, or None."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(*map(str, server_files))
    listener = socket.create_server((HOST, 0))
    port = listener.getsockname()[1]

    def serve():
        connection, _ = listener.accept()
        try:
            with server_context.wrap_socket(connection, server_side=True):
                pass
        except (ssl.SSLError, OSError):
            pass
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_context = ssl.create_default_context(cafile=str(trusted_ca))
    try:
        with socket.create_connection((HOST, port), timeout=10) as raw:
            with client_context.wrap_socket(raw, server_hostname=HOST):
                return None
    except ssl.SSLError as error:
        return error
    finally:
        thread.join(10)
        listener.close()


def test_the_certificate_authority_made_for_a_run_is_what_clients_trust(tmp_path):
    """The server certificate verifies under its own authority for 127.0.0.1, and under no other."""
    ca, cert, key = self_signed_certificates(tmp_path / "run")
    assert _handshake((cert, key), ca) is None
    other_ca = self_signed_certificates(tmp_path / "other")[0]
    assert isinstance(_handshake((cert, key), other_ca), ssl.SSLCertVerificationError)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes in /proc")
@pytest.mark.parametrize("tls", [pytest.param(True, id="tls"), pytest.param(False, id="insecure")])
def test_separate_processes_fit_without_a_supernode_killed_mid_fit(tmp_path, tls):
    """FedGrEM from its trimmed pooled start through ``flwr run`` with every party a process of its own. One
    SuperNode is killed (SIGKILL) once the rounds have begun: the server leaves that client out and fits the
    others, the same fit as in one process on their rows; every process started, and every process they
    started, is gone at the end. The trimmed pooled start alone (about 20 queries for the two clients, against
    78 with the local-EM start beside it, each a few seconds across processes) keeps the test to minutes; the
    defaults' other start runs across parties in ``tests/test_flower.py``, through Flower's grid and its
    simulation runtime."""
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
        deployment.run({"out": str(out), "timeout": 60, "min-clients": 2, "progress": True, "init": "trimmed-pooled"},
                       on_line=watch, timeout=2400)
    assert started.get("killed"), "the rounds never began:\n" + "\n".join(lines[-30:])
    assert deployment.alive() == []
    for name, process in deployment.processes.items():
        assert process.poll() is not None, name

    remote = joblib.load(out)
    # Client 2 (by its client-id) is left out; the fit is the in-process one on the other two.
    np.testing.assert_array_equal(remote.client_ids_, [0, 1])
    # Waited for until the query's timeout, or reported gone by the SuperLink first (its heartbeat stopped).
    assert any(r.reason == "no reply in time" or r.reason.startswith("the SuperLink reports the node gone")
               for r in remote.flower_rejections_)
    ref = FederatedGaussianMixture(5, init="trimmed-pooled", random_state=0).fit(X[:2])
    np.testing.assert_allclose(remote.means_, ref.means_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(remote.weights_, ref.weights_, rtol=0, atol=1e-8)
