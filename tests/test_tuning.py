"""FedGrEM's penalty chosen by federated held-out likelihood (penalty="auto")."""

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning

from fedmm import FederatedGaussianMixture
from fedmm.data import FederatedData
from fedmm.simulate import make_federated_gmm
from fedmm.tuning import PENALTY_GRID, first_best, holdout_split, trimmed_mean

CENTERS = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6), fraction=st.floats(0.05, 0.5),
       seed=st.integers(0, 1000))
def test_holdout_split_partitions_every_clients_samples(sizes, fraction, seed):
    X = [np.arange(n, dtype=float)[:, None] + 1000 * k for k, n in enumerate(sizes)]
    train, test = holdout_split(FederatedData.from_input(X), fraction, np.random.RandomState(seed))
    for k, n in enumerate(sizes):
        rows = np.concatenate([train.client(k)[0][:, 0], test.client(k)[0][:, 0]])
        np.testing.assert_array_equal(np.sort(rows), X[k][:, 0])
        if n > 1:
            assert train.n_samples[k] >= 1 and test.n_samples[k] >= 1


def test_trimmed_mean_leaves_out_the_lowest():
    assert trimmed_mean([-100.0, 1.0, 2.0, 3.0, 4.0], 0.2) == 2.5
    assert trimmed_mean([1.0, 2.0], 0.2) == 1.5


def test_auto_penalty_pools_alike_clients_more_than_different_ones():
    """Held-out likelihood chooses a larger C (more pooling) when clients share their components
    (h = 0) than when each client's components sit 4 units (4 noise sds) from the centre. Very
    large C also pools the outlier client and loses held-out likelihood on every honest client,
    so the choice stays finite."""
    chosen = {}
    for h in (0.0, 4.0):
        X, _ = make_federated_gmm(6, 150, centers=CENTERS, h=h, outlier_clients=[5], random_state=3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gm = FederatedGaussianMixture(3, method="fedgrem", penalty="auto", random_state=0).fit(X)
        table = gm.penalty_selection_
        np.testing.assert_array_equal(table["C"], PENALTY_GRID)
        assert table["client_scores"].shape == (len(PENALTY_GRID), 6)
        chosen[h] = table["C"][np.argmax(table["score"])]
        assert chosen[h] < PENALTY_GRID[-1]
    assert chosen[0.0] > chosen[4.0]


def test_first_best_keeps_the_earlier_of_ties_up_to_rounding():
    assert first_best([-3.0, -3.0 + 1e-13, -5.0]) == 0
    assert first_best([-3.0, -2.9]) == 1
    scores = np.array([[1.0, 2.0], [1.0 + 1e-12, 1.0]])  # (starts, clients)
    np.testing.assert_array_equal(first_best(scores, axis=0), [0, 0])
