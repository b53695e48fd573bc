"""D-FedEM (FedEM App. D.2, Alg. 4): FedEM with the server's average replaced by gossip over a graph."""

import warnings

import numpy as np
import pytest

from fedmm import FederatedGaussianMixture, graphs
from fedmm.methods import METHODS
from fedmm.data import FederatedData
from fedmm.engine import run
from fedmm.families import GaussianFamily, MixtureParams
from fedmm.protocol import ClientMessage
from fedmm.simulate import make_federated_gmm

CENTERS = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])


def _problem():
    X, truth = make_federated_gmm(6, [40, 90, 60, 120, 70, 50], centers=CENTERS, h=0.3, random_state=0)
    K, R, p = truth.theta.shape
    start = MixtureParams(np.full((K, R), 1 / R), np.broadcast_to(CENTERS + 0.5, (K, R, p)).copy(),
                          np.ones((K, R, 1)))
    return FederatedData.from_input(X), GaussianFamily("diag"), start


def test_on_the_complete_graph_with_metropolis_hastings_it_is_fedem():
    """W = 1 1^T / K: one exchange of (n_k theta_k, n_k) gives the paper's FedEM's n_k-weighted average
    (``aggregation="samples"``), unequal sizes too."""
    data, family, start = _problem()
    d = run(METHODS["d-fedem"](graph="complete", mixing="metropolis-hastings"), family, data, start, 30, 0.0)
    f = run(METHODS["fedem"](aggregation="samples"), family, data, start, 30, 0.0)
    for a, b in zip(d.params, f.params):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_a_client_hears_only_its_neighbours():
    strategy = METHODS["d-fedem"](graph="ring", mixing="metropolis-hastings")
    K, R, p = 6, 3, 2
    rng = np.random.RandomState(0)
    _, state = strategy.server_start(None, MixtureParams(np.full((K, R), 1 / R), np.zeros((K, R, p)),
                                                         np.ones((K, R, 1))), np.full(K, 50))
    message = ClientMessage(np.full(K, 50), np.zeros(K), np.full((K, R), 1 / R), rng.randn(K, R, p),
                            np.ones((K, R, 1)))
    before = strategy.server_step(message, state, 1)[0].params.theta
    changed = message._replace(theta=message.theta.copy())
    changed.theta[3] += 100.0                                   # client 3 is no neighbour of client 0 on the ring
    after = strategy.server_step(changed, state, 1)[0].params.theta
    np.testing.assert_array_equal(after[0], before[0])
    assert not np.allclose(after[2], before[2])                 # but it is client 2's


def test_more_gossip_means_less_disagreement_and_fedems_answer():
    data, family, start = _problem()
    f = run(METHODS["fedem"](aggregation="samples"), family, data, start, 60, 0.0)
    spread, error = [], []
    for n_gossip in (1, 4, 50):
        d = run(METHODS["d-fedem"](graph="ring", n_gossip=n_gossip), family, data, start, 60, 0.0)
        spread.append(np.abs(d.params.theta - d.params.theta.mean(axis=0)).max())
        error.append(np.abs(d.params.theta - f.params.theta).max())
    assert spread[0] > spread[1] > spread[2] and spread[2] < 1e-6
    assert error[2] < 1e-6


def test_graph_options_are_checked():
    X, _ = make_federated_gmm(4, 50, centers=CENTERS, random_state=0)
    with pytest.raises(ValueError, match="graph must be"):
        FederatedGaussianMixture(3, method=METHODS["d-fedem"](graph="star")).fit(X)
    with pytest.raises(ValueError, match="5 nodes but there are 4 clients"):
        FederatedGaussianMixture(3, method=METHODS["d-fedem"](graph=graphs.ring(5))).fit(X)


def test_the_random_graph_follows_random_state():
    X, _ = make_federated_gmm(8, 60, centers=CENTERS, h=0.5, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = (FederatedGaussianMixture(3, method="d-fedem", random_state=4, max_iter=20).fit(X) for _ in range(2))
    np.testing.assert_array_equal(a.means_, b.means_)
