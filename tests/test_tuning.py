"""FedGrEM's penalty chosen from the data: by cross-validated likelihood (penalty="auto") and by SURE."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning

from fedmm import FederatedGaussianMixture
from fedmm.data import FederatedData
from fedmm.methods import FedGrEM
from fedmm.simulate import make_federated_gmm
from fedmm.clients import LocalClients
from fedmm.algorithms.tuning import (PENALTY_CANDIDATES, SURE_GRID, alike_clients, noise_ratios, select_penalty,
                                     sure_grid_risk, sure_penalty, sure_risk)
from fedmm.robust import (TRIM, best_few, client_fold, client_folds, client_median, client_seeds, first_best,
                          fold_sizes, trimmed_mean)

CENTERS = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6), n_folds=st.integers(2, 6),
       seed=st.integers(0, 1000))
def test_folds_hold_out_every_sample_once(sizes, n_folds, seed):
    """Every sample of a client with two or more is held out exactly once, in folds of the sizes the server
    computes from the clients' sizes alone; a client with one sample is never held out; the training view
    of a fold is the rest of each client's rows."""
    X = [np.arange(n, dtype=float)[:, None] + 1000 * k for k, n in enumerate(sizes)]
    clients = LocalClients(_Values(), FederatedData.from_input(X))
    clients.deal_folds(n_folds, client_seeds(np.random.RandomState(seed), len(sizes)))
    for k, n in enumerate(sizes):
        assert np.bincount(clients.folds[clients.data.offsets[k]:clients.data.offsets[k + 1]] + 1,
                           minlength=n_folds + 1)[1:].tolist() == [fold_sizes(sizes, n_folds, v)[k]
                                                                   for v in range(n_folds)]
    held = [[] for _ in sizes]
    for v in range(n_folds):
        train = clients.training(v)
        np.testing.assert_array_equal(train.n_samples, np.array(sizes) - fold_sizes(sizes, n_folds, v))
        scored = clients.held_out_loglik(v, None)         # each client's sum of its held-out rows' values
        for k in range(len(sizes)):
            rows = np.setdiff1d(X[k][:, 0], train.data.client(k)[0][:, 0])
            assert scored[k] == rows.sum()
            held[k].extend(rows)
    for k, n in enumerate(sizes):
        np.testing.assert_array_equal(np.sort(held[k]), X[k][:, 0] if n > 1 else [])


def test_a_client_deals_its_folds_from_its_own_seed():
    """Separate parties deal alone: a client's folds depend on its size and seed, not on the other clients."""
    both = client_folds([10, 7], 3, np.random.RandomState(0))
    seeds = client_seeds(np.random.RandomState(0), 2)
    np.testing.assert_array_equal(both[1], client_fold(7, 3, seeds[1]))
    np.testing.assert_array_equal(client_fold(1, 5, 0), [-1])


class _Scores:
    """A family whose held-out log-likelihood of a sample is the candidate's table entry for its client."""

    def loglik(self, test, table):
        return table * test.n_samples


class _Values:
    """A family whose log-likelihood of a sample is its value (whatever the parameters)."""

    def loglik(self, test, params):
        client = np.repeat(np.arange(test.n_clients), test.n_samples)
        return np.bincount(client, weights=test.X[:, 0], minlength=test.n_clients)


def _choose(per_client, n=10):
    """``select_penalty`` on clients of ``n`` samples whose candidates score ``per_client`` (C, K)."""
    clients = LocalClients(_Scores(), FederatedData.from_input([np.zeros((n, 1))] * per_client.shape[1]))
    return select_penalty(lambda train, candidates: list(per_client), clients, ("less", "more"), 5,
                          TRIM, np.random.RandomState(0))


def test_select_penalty_pools_more_only_when_it_predicts_better_beyond_noise():
    gain = np.array([0.5, 0.6, 0.4, 0.5, 0.55, 0.45, 0.5, 0.5, 0.6, 0.4])
    base = np.zeros(10)
    chosen, table = _choose(np.array([base, base + gain]))
    assert chosen == "more" and table["chosen"] == "more"
    np.testing.assert_allclose(table["client_scores"][1] - table["client_scores"][0], gain)
    assert _choose(np.array([base, base + gain]), n=2)[0] == "more"   # three of the five folds hold nothing out
    noisy = gain * np.array([1, -1] * 5) + 0.01       # better on average, by far less than its noise
    assert _choose(np.array([base, base + noisy]))[0] == "less"
    outlier = gain.copy()
    outlier[[3, 7]] = -50.0                            # two clients (TRIM of 10) that pooling ruins
    assert _choose(np.array([base, base + outlier]))[0] == "more"
    outlier[1] = -50.0                                 # a third is not left out
    assert _choose(np.array([base, base + outlier]))[0] == "less"


def test_trimmed_mean_leaves_out_the_lowest():
    assert trimmed_mean([-100.0, 1.0, 2.0, 3.0, 4.0], 0.2) == 2.5
    assert trimmed_mean([1.0, 2.0], 0.2) == 1.5


@pytest.mark.slow
def test_auto_penalty_keeps_different_clients_apart():
    """Clients whose components sit 4 noise sds from the centre, and an outlier client: pooling everything
    predicts every honest client's held-out samples worse, so ``penalty="auto"`` keeps the default (the
    raised floor pools no more here), and
    its fit is the default's (the folds draw from a copy of the random state). Half a minute of cross-validated
    fits: CI runs it in its own step (``.ci/run``), outside the default run's budget."""
    X, _ = make_federated_gmm(6, 150, centers=CENTERS, h=4.0, outlier_clients=[5], random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm = FederatedGaussianMixture(3, method=FedGrEM(penalty="auto"), random_state=0).fit(X)
        chosen = FederatedGaussianMixture(3, method=FedGrEM(penalty="sure-floored"), random_state=0).fit(X)
    table = gm.penalty_selection_
    assert table["candidates"] == list(PENALTY_CANDIDATES) and table["chosen"] == PENALTY_CANDIDATES[0]
    assert table["client_scores"].shape == (len(PENALTY_CANDIDATES), 6)
    assert (table["client_scores"][-1, :5] < table["client_scores"][0, :5] - 0.1).all()   # full pooling
    np.testing.assert_array_equal(gm.means_, chosen.means_)   # the chosen penalty's fit, same random_state
    scaled = FederatedGaussianMixture(3, method=FedGrEM(penalty="auto"), random_state=0).fit([10 * x + 3 for x in X])
    # Held-out log-likelihoods per sample in the data's units: 2 features, each 10 times wider.
    np.testing.assert_allclose(scaled.penalty_selection_["score"], table["score"] - 2 * np.log(10), atol=1e-8)


def test_first_best_keeps_the_earlier_of_ties_up_to_rounding():
    assert first_best([-3.0, -3.0 + 1e-13, -5.0]) == 0
    assert first_best([-3.0, -2.9]) == 1
    scores = np.array([[1.0, 2.0], [1.0 + 1e-12, 1.0]])  # (starts, clients)
    np.testing.assert_array_equal(first_best(scores, axis=0), [0, 0])


def test_best_few_ranks_the_highest_first_and_keeps_the_earlier_of_ties():
    assert best_few([-3.0, -1.0, -3.0 + 1e-13, -2.0], 3) == [1, 3, 0]
    assert best_few([0.5, 0.2], 5) == [0, 1]


@settings(max_examples=50, deadline=None)
@given(st.floats(0.01, 10.0), st.floats(0.01, 10.0), st.floats(1e-3, 10.0), st.integers(1, 20))
def test_sure_risk_at_the_ends(distance, threshold, v, p):
    """Threshold 0 keeps ``theta``: risk ``p v`` exactly; a threshold beyond the distance gives the
    centre, whose squared error is ``D^2 - p v`` in expectation (``E D^2 = ||mu - c||^2 + p v``)."""
    assert sure_risk(distance, 0.0, v, p) == np.float64(p * v)
    assert sure_risk(distance, distance + threshold, v, p) == pytest.approx(distance ** 2 - p * v)


@pytest.mark.parametrize("threshold", [0.3, 1.0, 2.5])
def test_sure_risk_is_unbiased_for_the_group_soft_threshold(threshold):
    """The mean of SURE over draws of ``theta ~ N(mu, v I)`` equals the mean squared error of
    ``c + (1 - t / D)_+ (theta - c)`` (Stein 1981), within four standard errors of the paired difference."""
    rng = np.random.RandomState(0)
    p, v, n = 5, 0.3, 40000
    mu, c = np.ones(p), np.ones(p) + 0.4 * rng.randn(p)
    theta = mu + np.sqrt(v) * rng.randn(n, p)
    D = np.linalg.norm(theta - c, axis=1)
    nu = c + np.maximum(1 - threshold / D, 0)[:, None] * (theta - c)
    diff = sure_risk(D, threshold, v, p) - ((nu - mu) ** 2).sum(axis=1)
    assert abs(diff.mean()) < 4 * diff.std() / np.sqrt(n)
    # Not vacuous: the risk of keeping theta (p v = 1.5) or of the centre differs from this one's.
    assert abs(((nu - mu) ** 2).sum(axis=1).mean() - p * v) > 0.1


@settings(max_examples=60, deadline=None)
@given(blocks=st.lists(st.tuples(st.floats(0.0, 20.0), st.floats(0.5, 40.0), st.floats(1e-3, 2.0)), min_size=1,
                       max_size=30), p=st.integers(1, 12))
def test_sure_grid_risk_is_the_sum_of_the_blocks_risks(blocks, p):
    """The binned, cumulative evaluation against the oracle: ``sure_risk`` summed block by block for every
    ``lambda`` (a ``lambda`` at a block's ``D root`` within rounding is left out: SURE jumps there by ``2 v``)."""
    D, root, v = (np.array(x) for x in zip(*blocks))
    grid = np.asarray(SURE_GRID)
    near = np.abs(D[:, None] * root[:, None] - grid) <= 1e-9 * grid
    expected = np.array([sure_risk(D, lam / root, v, p).sum() for lam in grid])
    scale = np.abs(p * v).sum() + (D ** 2).sum() + grid ** 2 * (1.0 / root ** 2).sum()
    ok = ~near.any(axis=0)
    np.testing.assert_allclose(sure_grid_risk(D, root, v, p, grid)[ok], expected[ok], rtol=0, atol=1e-12 * scale[ok].max())


def _sure_design(K=20, R=3, p=4, N=50.0, h=0.0, seed=0):
    """Distances of K clients' estimates (variance 1 / N per coordinate) from the centre, at spread h."""
    rng = np.random.RandomState(seed)
    offsets = rng.randn(K, R, p)
    offsets *= h / np.linalg.norm(offsets, axis=-1, keepdims=True)
    theta = offsets + rng.randn(K, R, p) / np.sqrt(N)
    return np.linalg.norm(theta - theta.mean(axis=0), axis=-1), np.full(K, 150.0), np.full((K, R), N), p


def test_sure_penalty_pools_alike_clients_and_keeps_different_ones_apart():
    D, sizes, N, p = _sure_design(h=0.0)
    lam = sure_penalty(D, sizes, N, p)
    assert (D <= lam / np.sqrt(150)).mean() >= 0.9
    D, sizes, N, p = _sure_design(h=2.0)       # 2 against a noise norm of sqrt(4 / 50) = 0.28
    lam = sure_penalty(D, sizes, N, p)
    assert (D <= lam / np.sqrt(150)).mean() == 0
    assert lam / np.sqrt(150) < 0.5 * np.sqrt(p / 50)


def test_sure_penalty_is_not_decided_by_outliers_or_empty_components():
    D, sizes, N, p = _sure_design(h=0.0)
    lam = sure_penalty(D, sizes, N, p)
    far = D.copy()
    far[:4] = 100.0                            # four outlier clients (trim: floor(0.2 * 20) = 4)
    assert sure_penalty(far, sizes, N, p) == lam
    assert sure_penalty(far, sizes, N, p, trim=0.0) < lam
    empty = N.copy()
    empty[:4, 0], D[:4, 0] = 1e-9, 100.0       # nearly empty components far away
    assert sure_penalty(D, sizes, empty, p) == lam
    assert sure_penalty(D, sizes, np.full_like(N, 0.5), p) == SURE_GRID[-1]


@settings(max_examples=60, deadline=None)
@given(K=st.integers(1, 30), R=st.integers(1, 4), trim=st.sampled_from([0.0, 0.2, 1 / 3]),
       seed=st.integers(0, 2 ** 31 - 1))
def test_alike_clients_leave_out_the_most_outlying_whatever_their_order(K, R, trim, seed):
    """Blocks of N >= 1 count (noise_ratios); the floor(trim K) clients with the largest mean N d^2 / p over them
    are left out, the same clients in any order (up to ties); a client far from the centre on one component
    only is among them."""
    rng = np.random.RandomState(seed)
    p, N = 3, rng.choice([0.5, 20.0, 80.0], size=(K, R))
    distance = np.abs(rng.randn(K, R)) * np.sqrt(p / N)
    distance[0, 0], N[0, 0] = 100.0, 50.0
    ratio, counted = noise_ratios(distance, N, p)
    assert np.array_equal(counted, N >= 1) and np.allclose(ratio[counted], (N * distance ** 2 / p)[counted])
    kept = alike_clients(distance, N, p, trim)
    assert len(kept) == K - int(np.floor(trim * K))
    assert (0 in kept) == (int(np.floor(trim * K)) == 0)
    statistic = ratio.sum(1) / np.maximum(counted.sum(1), 1)
    assert statistic[kept].max() <= np.delete(statistic, kept).min(initial=np.inf)
    order = rng.permutation(K)
    kept_permuted = alike_clients(distance[order], N[order], p, trim)
    np.testing.assert_array_equal(np.sort(statistic[order][kept_permuted]), np.sort(statistic[kept]))   # ties aside


@settings(max_examples=60, deadline=None)
@given(K=st.integers(1, 40), shape=st.lists(st.integers(1, 4), max_size=2), ties=st.booleans(),
       seed=st.integers(0, 2 ** 31 - 1))
def test_client_median_is_numpys_median_over_clients(K, shape, ties, seed):
    values = np.random.RandomState(seed).standard_normal((K, *shape))
    if ties:
        values = np.round(values)  # repeated values around the middle
    assert np.array_equal(client_median(values), np.median(values, axis=0))


@pytest.mark.parametrize("K", [2048, 2049, 5000, 5001])
@pytest.mark.parametrize("kind", ["normal", "ties", "sorted", "constant", "skewed"])
def test_compiled_client_median_is_numpys_median(K, kind):
    """From MIN_CLIENTS clients on, the compiled median (one pass, a bracket of the middle): numpy's numbers, also
    where the bracket misses (sorted rows) or keeps too many (ties, a constant column), the full selection then."""
    from fedmm.reductions import MIN_CLIENTS
    assert K >= MIN_CLIENTS
    values = np.random.RandomState(K).standard_normal((K, 3, 4))
    if kind == "ties":
        values = np.round(values)
    elif kind == "sorted":
        values = np.sort(values, axis=0)[::-1].copy()
    elif kind == "constant":
        values[:, 1] = 2.5
    elif kind == "skewed":
        values = np.exp(4.0 * values)
    assert np.array_equal(client_median(values), np.median(values, axis=0))


def test_largest_magnitudes_is_numpys():
    """The compiled ``np.abs(a).max(axis=2)`` of the central update's tolerance and the variances' typical size:
    numpy's numbers, NaN, infinities and signed zeros included."""
    from fedmm.reductions import largest_magnitudes
    a = np.random.RandomState(0).standard_normal((60, 5, 10))
    a[3, 2, 4] = a[7, 1, 0] = np.nan
    a[9, 0, 9], a[10, 3, 2] = -np.inf, np.inf
    a[11, 0], a[12, 1] = -0.0, np.nan
    assert np.array_equal(largest_magnitudes(a), np.abs(a).max(axis=2), equal_nan=True)
    assert np.array_equal(largest_magnitudes(a[:, :, :1]), np.abs(a[:, :, :1]).max(axis=2), equal_nan=True)


def test_largest_changes_are_numpys():
    """The compiled ``np.abs(a - b).max(axis=(1, 2))`` of every round's parameter change (:func:`client_change`):
    numpy's numbers, NaN, infinities and broadcast rows included."""
    from fedmm.reductions import largest_changes
    rng = np.random.RandomState(0)
    a, b = rng.standard_normal((2, 60, 5, 10))
    a[3, 2, 4] = b[7, 0, 0] = np.nan
    a[9, 0, 9], b[9, 1, 1], a[10, 3, 2] = -np.inf, np.inf, np.inf
    a[11, 4, 9], b[11, 4, 9] = np.inf, np.inf           # inf - inf: NaN
    for x, y in [(a, b), (a[:, :1, :1], b[:, :1, :1]), (np.broadcast_to(a[:1], a.shape), b)]:
        assert np.array_equal(largest_changes(x, y), np.abs(x - y).max(axis=(1, 2)), equal_nan=True)


def test_fill_empty_medians_is_numpys():
    """The compiled fill of FedGrEM's noise units (:func:`fedmm.algorithms.variances.held_variances`): each client's
    empty components take numpy's ``nanmedian`` over its others, with an odd and an even number of them; clients with
    no empty component or no other are left as they are."""
    from fedmm.reductions import fill_empty_medians
    rng = np.random.RandomState(0)
    values = rng.uniform(0.5, 2.0, (40, 5, 3))
    empty = rng.rand(40, 5) < 0.3
    empty[0], empty[1], empty[2, :2], empty[3, :1] = True, False, True, True
    filled = values.copy()
    fill_empty_medians(filled, empty)
    others = np.nanmedian(np.where(empty[..., None], np.nan, values), axis=1, keepdims=True)
    some = empty.any(axis=1) & ~empty.all(axis=1)
    expected = np.where(empty[..., None] & some[:, None, None], others, values)
    assert np.array_equal(filled, expected)
    assert np.array_equal(filled[0], values[0]) and np.array_equal(filled[1], values[1])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_has_tiny_is_numpys(dtype):
    """The data check's compiled look for nonzero values below ``1 / MAX_MAGNITUDE``: numpy's answer, in float32
    (where the threshold rounds to 0 and no value is tiny) and float64, zeros, NaN and strided views included."""
    from fedmm.data import MAX_MAGNITUDE
    from fedmm.reductions import has_tiny
    tiny = 1 / MAX_MAGNITUDE
    a = np.random.RandomState(0).standard_normal((300, 7)).astype(dtype)
    a[5, 2], a[6, 3] = 0.0, np.nan
    cases = [a, a[::2, ::3], np.asfortranarray(a)]
    b = a.copy()
    b[299, 6] = 1e-200
    c = a.copy()
    c[0, 0] = -1e-151
    cases += [b, c, b[1::2], c[:, 1:]]
    for values in cases:
        assert has_tiny(values, tiny) == ((np.abs(values) < tiny) & (values != 0)).any()
    assert has_tiny(np.array([[1.0, -1e-151]]), tiny) and not has_tiny(np.array([[1.0, 0.0, 1e-149]]), tiny)


def test_sure_penalty_leaves_empty_components_out_quietly():
    """Per-component sizes are 0 for an empty component; SURE leaves it out (N < 1) without a division
    warning, and its choice is the one without that block."""
    rng = np.random.RandomState(0)
    N = np.full((10, 3), 50.0)
    distance = np.abs(rng.randn(10, 3)) * np.sqrt(4 / N)
    with_empty = N.copy()
    with_empty[0, 2] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chosen = sure_penalty(distance, 3 * with_empty, with_empty, 4)
    kept = N.copy()
    kept[0, 2] = 0.5  # below one sample: left out as well, with a positive size
    assert chosen == sure_penalty(distance, 3 * kept, kept, 4)
