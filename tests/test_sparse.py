"""Sparse FedGrEM (issue 64): the threshold's formulas, support recovery, robustness, equivariance, registry."""

import itertools
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.algorithms.sparse import firm_threshold, free_coordinates, soft_threshold_coordinates, sparsify, \
    sure_threshold, threshold_level
from fedmm.methods import METHODS, SparseFedGrEM
from fedmm.metrics import estimation_errors
from fedmm.theory import bound, sparse_bound, sparse_rate

ROOT = Path(__file__).parent.parent


def _design(d=60, s=3, K=5, n=120, sep=6.0, outlier=True, seed=0):
    """Two components, means +-sep / (2 sqrt(s)) on the first s features, identity covariances."""
    rng = np.random.default_rng(seed)
    mu = np.zeros((2, d))
    mu[0, :s], mu[1, :s] = sep / 2 / np.sqrt(s), -sep / 2 / np.sqrt(s)
    X = [mu[rng.integers(0, 2, n)] + rng.normal(size=(n, d)) for _ in range(K)]
    if outlier:
        X.append(2.0 + np.sqrt(3.0) * rng.normal(size=(n, d)))      # App. B.1's outlier task
    return X, mu


def _error(means, mu, honest):
    """Largest honest-client error of the means, over the two labellings."""
    return max(min(np.linalg.norm(m - mu, axis=1).max(), np.linalg.norm(m[::-1] - mu, axis=1).max())
               for m in means[:honest])


def _fit(X, method=None, n_components=2, **kwargs):
    """sparse-fedgrem with the means sparse about 0 (the designs' model) unless ``method`` says otherwise."""
    method = SparseFedGrEM(sparse_about="origin") if method is None else method
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FederatedGaussianMixture(n_components, method=method, random_state=0, **kwargs).fit(X)


def test_thresholds_follow_their_formulas():
    u = np.array([-3.0, -1.5, -0.5, 0.0, 0.8, 1.2, 2.0, 5.0])
    np.testing.assert_allclose(soft_threshold_coordinates(u, 1.0), [-2.0, -0.5, 0, 0, 0, 0.2, 1.0, 4.0])
    # firm: 0 up to tau, 2(|u| - tau) between tau and 2 tau, u beyond
    np.testing.assert_allclose(firm_threshold(u, 1.0), [-3.0, -1.0, 0, 0, 0, 0.4, 2.0, 5.0])
    np.testing.assert_allclose(threshold_level(np.array([100.0, 400.0]), 500, 2.0),
                               2.0 * np.sqrt(2 * np.log(500) / np.array([100.0, 400.0])))


def test_sparsify_thresholds_the_centre_at_the_pooled_size_and_deviations_at_their_own():
    K, R, d = 4, 1, 3
    center = np.broadcast_to(np.array([0.05, 0.5, 3.0]), (K, R, d)).copy()
    theta = center.copy()
    theta[3, 0] += [0.4, 0.0, 0.0]                                 # one unpooled client's small deviation
    pooled = np.array([[True], [True], [True], [False]])
    N = np.full((K, R), 100.0)
    out, c = sparsify(theta, center, np.zeros(K, dtype=int), pooled, N, np.ones((R, 1)), own=False)
    tau_c, tau_k = threshold_level(300.0, d), threshold_level(100.0, d)     # 0.085, 0.148
    np.testing.assert_allclose(c[0, 0], [0.0, 0.5, 3.0])          # noise below tau_c gone, the rest unbiased
    assert 0.4 > 2 * tau_k and tau_c < 0.05 * 2                    # the deviation is kept whole ...
    np.testing.assert_allclose(out[3, 0], [0.4, 0.5, 3.0])
    np.testing.assert_allclose(out[0, 0], c[0, 0])                 # ... and pooled clients take the centre
    # A client's own step: its deviation's threshold counts the K R d coordinates thresholded at once.
    tau_own = threshold_level(100.0, K * R * d)                                # 0.223
    own = sparsify(theta, center, np.zeros(K, dtype=int), pooled, N, np.ones((R, 1)))[0]
    np.testing.assert_allclose(own[3, 0], [0.0 + 2 * (0.4 - tau_own), 0.5, 3.0])   # in the firm rule's band
    soft = sparsify(theta, center, np.zeros(K, dtype=int), pooled, N, np.ones((R, 1)), thresholding="soft")[1]
    np.testing.assert_allclose(soft[0, 0], [0.0, 0.5 - tau_c, 3.0 - tau_c])


def test_free_coordinates_count_each_distinct_value_once_and_the_origin_not_at_all():
    # Contrasts from the mixture mean: features 0 and 3 take a value per component, 1 and 2 one value they share.
    np.testing.assert_allclose(free_coordinates(np.array([[1.0, 5.0, 5.0, 2.0], [3.0, 5.0, 5.0, 7.0]]), "mean", 4),
                               [3.0, 3.0])
    # About the origin on the 3 thresholded coordinates a zero is no parameter; the last (an intercept) is shared.
    np.testing.assert_allclose(free_coordinates(np.array([[1.0, 0.0, 0.0, 2.0], [-1.0, 0.0, 4.0, 2.0]]), "origin", 3),
                               [1.5, 2.5])
    dense = np.random.default_rng(0).normal(size=(3, 6))
    np.testing.assert_allclose(free_coordinates(dense, "mean", 6), 6.0)          # no zeros: FedGrEM's count


def test_a_client_thresholded_onto_the_centre_counts_as_on_it():
    """A client the central update left off the centre but whose deviation the sparse step zeroed sits on the
    centre: the centre counts (an outside audit found a component counted at 5.6 of its 27 free coordinates)."""
    model = SimpleNamespace(pooled_=np.array([[True, False], [True, False], [False, False]]),
                            pooling_threshold_=np.ones((3, 2)), distance_to_center_=np.full((3, 2), 2.0),
                            pooled_variances_=np.ones((3, 2), dtype=bool),
                            _free_coordinates=(np.array([[3.0, 2.0]]), np.array([[0, 0], [0, 0], [2, 0]])))
    means, _ = SparseFedGrEM().distinct_components(model, np.arange(3), 4, False)
    # component 0: its centre's 3, client 2's two coordinates at kept = 1 - 1 / 2; component 1: its centre's 2
    np.testing.assert_allclose(means * 4, [3.0 + 1.0 + 0.5, 2.0])


def test_clients_that_differ_on_a_few_features_keep_their_differences():
    """One component; each client's mean moved N(0, 0.5^2) on 20 of 200 features, 2.2 from the others in norm. The
    group lasso's test of a whole deviation is set by its 200 noise coordinates and put every client on the centre
    (its error its whole deviation), and BIC bought the differences back with extra components (2 or 3 in 4 of 4
    seeds). Each client's own step thresholded coordinate-wise keeps them: its error is the noise on the features it
    was moved on and the moves below the threshold (``sqrt(2 log(K R d) / n_k)``, 0.22 to 0.55 here)."""
    rng = np.random.default_rng(0)
    K, d, s = 10, 200, 20
    means = np.zeros((K, d))
    means[:, :s] = 2.0 / np.sqrt(s) + 0.5 * rng.normal(size=(K, s))
    X = [m + rng.normal(size=(n, d)) for m, n in zip(means, rng.integers(50, 301, K))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = [FederatedGaussianMixture(R, method="sparse-fedgrem", covariance_type="identity", random_state=0)
                .fit(X) for R in (1, 2)]
    error = np.linalg.norm(fits[0].means_[:, 0] - means, axis=1)
    moved = np.linalg.norm(means - means.mean(axis=0), axis=1)
    assert (error < moved).all() and error.mean() < 0.5 * moved.mean()
    assert fits[0].bic(X) < fits[1].bic(X)


def test_a_clients_deviation_is_thresholded_at_its_own_size_among_many_small_clients():
    """As above, beside 100 clients of 5 rows: a client's size counts in the centre capped at four median clients'
    (``trusted_sizes``: 20 rows here), but its deviation is its own estimate, thresholded at its own 50-300 rows'
    noise level (0.26-0.63); at the capped 20 rows' (1.0) most of its moves went (mean error 0.72 of the moves)."""
    rng = np.random.default_rng(0)
    K, d, s = 10, 200, 20
    means = np.zeros((K, d))
    means[:, :s] = 2.0 / np.sqrt(s) + 0.5 * rng.normal(size=(K, s))
    X = [m + rng.normal(size=(n, d)) for m, n in zip(means, rng.integers(50, 301, K))]
    X += [means.mean(axis=0) + rng.normal(size=(5, d)) for _ in range(100)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = FederatedGaussianMixture(1, method="sparse-fedgrem", covariance_type="identity", random_state=0).fit(X)
    error = np.linalg.norm(fit.means_[:K, 0] - means, axis=1)
    assert error.mean() < 0.62 * np.linalg.norm(means - means.mean(axis=0), axis=1).mean()


def test_three_coordinated_clients_of_ten_do_not_become_a_component():
    """Three clients of ten shifted by 4 on the same 5 features off the support (an outside audit's attack): their
    shift (8.9 in norm) is farther than the components' separation (6), so k-FED's clustering of the clients' own
    starts made every screened candidate the split of honest against coordinated clients (seeds 1 and 2 here: the
    honest clients' error 9.4, the support the attackers' five features). The candidates from the clients' starts
    aligned (one label per component of each client) keep the components apart, and the median client's fit
    chooses them."""
    rng = np.random.default_rng(1)
    K, d, s, n = 10, 100, 10, 150
    mu = np.zeros((2, d))
    mu[0, :s] = 3.0 / np.sqrt(s)
    mu[1] = -mu[0]
    X = [mu[rng.integers(0, 2, n)] + rng.normal(size=(n, d)) for _ in range(K)]
    for k in (7, 8, 9):
        X[k][:, s:s + 5] += 4.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = FederatedGaussianMixture(2, method="sparse-fedgrem", covariance_type="identity", random_state=1).fit(X)
    honest = estimation_errors(fit.weights_, fit.means_, np.full((7, 2), 0.5), np.broadcast_to(mu, (7, 2, d)))[1]
    assert honest.max() < 1.0
    assert np.flatnonzero(fit.support_).tolist() == list(range(s))


@pytest.mark.parametrize("about", ["mean", "origin"])
def test_bic_counts_the_sparse_fits_free_coordinates_and_finds_two_components(about):
    """Counted densely, a second component cost ``d log n``, more than its likelihood gain at d = 500: BIC chose one
    component (``validation/sparse.py``'s design: one in 10 of 10 seeds, two since)."""
    X, _ = _design(d=500, s=3, K=5, n=200, sep=4.0, outlier=False)
    fits = [_fit(X, method=SparseFedGrEM(sparse_about=about), covariance_type="identity", n_components=R)
            for R in (1, 2, 3)]
    assert np.argmin([fit.bic(X) for fit in fits]) == 1
    two = fits[1]
    # d (the mixture mean's, or 0 about the origin) and the support's 3 per component, 1 proportion a client
    expected = (500 if about == "mean" else 0) + 2 * 3 + 5
    assert two._n_parameters(np.arange(5)) == pytest.approx(expected, abs=4), two._n_parameters(np.arange(5))
    dense = _fit(X, method="fedgrem", covariance_type="identity")
    assert dense._n_parameters(np.arange(5)) == pytest.approx(2 * 500 + 5)


def test_support_recovered_and_the_outlier_kept_out():
    X, mu = _design()
    sparse = _fit(X, covariance_type="identity")
    dense = _fit(X, method="fedgrem", covariance_type="identity")
    # Every true feature; of 57 noise features times 2 components, the universal threshold (2.9 sd) lets
    # about half a false positive through by chance.
    assert sparse.support_[:3].all() and sparse.support_[3:].sum() <= 2
    assert 5 in sparse.suspected_outliers_
    err_sparse, err_dense = _error(sparse.means_, mu, 5), _error(dense.means_, mu, 5)
    assert err_sparse < 0.5 * err_dense and err_sparse < 0.35, (err_sparse, err_dense)
    assert sparse.history_["support_size"][-1] == sparse.support_.sum()


def test_equivariant_to_shifting_and_rescaling_features():
    """covariance_type="diag" fits in standard units, and sparsity is about the mixture mean there."""
    X, _ = _design(d=30, outlier=False, K=4)
    scale, shift = np.linspace(0.5, 20.0, 30), np.linspace(-100.0, 100.0, 30)
    a = _fit(X, method="sparse-fedgrem")                # the default: contrasts from the mixture mean
    b = _fit([x * scale + shift for x in X], method="sparse-fedgrem")
    np.testing.assert_allclose(b.means_, a.means_ * scale + shift, rtol=1e-6, atol=1e-6 * np.abs(shift).max())
    np.testing.assert_array_equal(a.support_, b.support_)
    assert a.support_[:3].all() and a.support_.sum() <= 4


def test_a_new_clients_fit_is_equivariant_too():
    """The new client's thresholds are in noise units, SURE's included: rescaled and shifted features give its
    means mapped back, to the new client's stopping tolerance (``tol=1e-3`` of a noise sd; the fits agree to 1e-7)."""
    rng = np.random.default_rng(0)
    X, mu = _design(d=60, s=4, K=6, n=150, sep=6.0, outlier=False)
    x = (mu + 0.8 * (np.arange(60) < 4))[rng.integers(0, 2, 300)] + rng.normal(size=(300, 60))
    scale, shift = np.linspace(0.5, 20.0, 60), np.linspace(-100.0, 100.0, 60)
    a = _fit(X, method="sparse-fedgrem", covariance_type="diag")
    b = _fit([v * scale + shift for v in X], method="sparse-fedgrem", covariance_type="diag")
    mine, theirs = a.personalize(x).params_.theta[0], b.personalize(x * scale + shift).params_.theta[0]
    assert np.abs(mine - a.centers_[0]).max() > 0.5                   # it left the consensus
    np.testing.assert_allclose((theirs - shift) / scale, mine, atol=1e-3)          # 1.0e-4 measured


def test_listed_in_the_registry_and_the_docs_and_validated():
    assert METHODS["sparse-fedgrem"] is SparseFedGrEM
    text = (ROOT / "docs" / "methods.md").read_text()
    assert re.search(r'^\| `"sparse-fedgrem"` \| `SparseFedGrEM` \|', text, flags=re.M)
    with pytest.raises(ValueError, match="threshold_scale"):
        FederatedGaussianMixture(2, method=SparseFedGrEM(threshold_scale=0.0)).fit(_design(d=5)[0])


def test_the_sparse_bound_is_the_dense_one_with_s_log_d_for_d():
    setting = dict(n=100, K=11, R=2, h=0.2, eps=1 / 11)
    d, s = 500, 10
    sparse, dense = sparse_bound(d=d, s=s, **setting), bound(d=d, **setting)
    assert sparse.terms["aggregation"] == pytest.approx(dense.terms["aggregation"] * np.sqrt(s * np.log(d) / d))
    assert sparse.terms["outliers"] == pytest.approx(setting["eps"] * sparse_rate(100, d, s, 2))
    assert sparse.terms["mixing"] == dense.terms["mixing"] and sparse.terms["heterogeneity"] == 0.2
    with pytest.raises(ValueError, match="s must be"):
        sparse_bound(d=10, s=11, **setting)


@pytest.mark.parametrize("rows, shift", [(300, 1.0), (300, 1.5), (30, 0.0)])
def test_a_new_client_deviates_on_the_support_only_and_keeps_the_consensus_with_few_rows(rows, shift):
    """FedGrEM's group step kept the consensus for a new client 1 off it on the support (the fit's penalty is a
    dense deviation's) and at 1.5 left it on 197 noise features (error 1.47); the coordinate rule finds the
    deviation and nothing else."""
    s = 3
    X, mu = _design(d=200, s=s, K=5, n=120, outlier=False)
    fit = _fit(X, covariance_type="identity")
    rng = np.random.default_rng(1)
    truth = mu.copy()
    truth[:, :s] += shift * np.array([[1.0, -1.0, 1.0], [-1.0, 1.0, 1.0]]) / np.sqrt(s)
    x = truth[rng.integers(0, 2, rows)] + rng.normal(size=(rows, 200))
    new = fit.personalize(x).params_.theta[0]
    deviation = new - fit.centers_[0]
    assert (deviation[:, s:] != 0).sum() <= 2               # universal threshold: ~half a false positive
    error, consensus = _error(new[None], truth, 1), _error(fit.centers_[0][None], truth, 1)
    if shift:
        assert error < 0.6 * consensus, (error, consensus)   # 0.53 against 1.09, 0.31 against 1.59
    else:
        assert error <= consensus + 0.05, (error, consensus)


def test_sure_threshold_is_universal_for_noise_none_for_a_dense_signal_and_keeps_a_sparse_one():
    rng = np.random.default_rng(0)
    d = 500
    z = rng.normal(size=(3, d))
    z[1] += 6.0                                       # dense: every coordinate 6 noise sds off
    z[2, :10] += 10.0                                 # sparse and strong
    t = sure_threshold(z)
    assert t[0] == pytest.approx(np.sqrt(2 * np.log(d))) and t[1] == 0.0
    assert 0.0 < t[2] <= np.sqrt(2 * np.log(d)) and (np.abs(firm_threshold(z[2], t[2]))[:10] > 0).all()


def test_a_new_client_shifted_on_every_feature_keeps_both_components():
    """An outside audit's case: the coordinate rule alone shrank a dense shift of 0.5 a feature in the firm band, one
    component took every row and the other stayed at the consensus (15.8 from the truth); the group step, which
    leaves the consensus here, decides."""
    rng = np.random.default_rng(0)
    d = 300
    mu = np.zeros((2, d))
    mu[0, :5], mu[1, :5] = 0.9, -0.9
    X = [mu[z] + rng.normal(size=(len(z), d)) for z in (rng.integers(0, 2, 200) for _ in range(8))]
    fit = _fit(X, covariance_type="identity")
    z = rng.integers(0, 2, 300)
    new = fit.personalize(mu[z] + 0.5 + rng.normal(size=(300, d)))
    assert new.weights_.min() > 0.3
    assert _error(new.params_.theta, mu + 0.5, 1) < 0.3 * 0.5 * np.sqrt(d)


def test_fits_on_flower_as_in_one_process():
    """The clients' side is FedGrEM's (rebuilt from ``client_options``); the sparse step is the server's."""
    flower = pytest.importorskip("fedmm.flower")
    from fedmm.flower.testing import LocalGrid
    X, _ = _design(d=20, K=4)
    ref = _fit(X, covariance_type="identity")
    apps = [flower.client_app(lambda ctx, k=k: (X[k], None)) for k in range(len(X))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        remote = flower.fit(FederatedGaussianMixture(2, method=SparseFedGrEM(sparse_about="origin"),
                                                     covariance_type="identity", random_state=0), LocalGrid(apps))
    np.testing.assert_allclose(remote.means_, ref.means_, rtol=0, atol=1e-8)
    np.testing.assert_array_equal(remote.support_, ref.support_)


def test_robust_to_the_outlier_client_where_plain_averaging_is_not():
    """``penalty=inf, reweighting=False`` pools every client by its size (gradient FedEM with the sparse step):
    the outlier drags the centre by its share on every feature, a dense shift above the threshold (measured:
    3.6, 3.0, 15.2 on seeds 0 to 2, every feature kept); FedGrEM's robust central update keeps it out."""
    X, mu = _design()
    robust = _fit(X, covariance_type="identity")
    averaged = _fit(X, method=SparseFedGrEM(penalty=np.inf, reweighting=False, sparse_about="origin"),
                    covariance_type="identity")
    assert _error(robust.means_, mu, 5) < 0.35 < 2.0 < _error(averaged.means_, mu, 5)
    assert averaged.support_.sum() > 30 and robust.support_.sum() <= 5


def test_screened_features_are_those_of_excess_variance():
    from fedmm.initialization import screened_features
    variances = np.ones(100)
    variances[[3, 50]] = 1.5          # 1.5 against 1 + 6 sqrt(2 / 1000) = 1.27
    variances[7] = 1.2                # within the noise of a variance from 1,000 rows
    np.testing.assert_array_equal(screened_features(variances, 1000), [3, 50])
    assert screened_features(np.ones(5) + np.arange(5) * 1e-3, 1000).size == 0


def test_the_screened_start_finds_the_clusters_where_the_dense_starts_do_not():
    """At d = 3000, 10 clients of 100 rows, the dense starts' k-means and EM see mostly noise (issue 64's design
    failed from d = 2000 on: the components collapse, error 2); the screened start (the default) keeps the
    error of d = 100, in 3 queries after the units."""
    X, mu = _design(d=3000, s=10, K=10, n=100, sep=4.0)
    screened = _fit(X, covariance_type="identity")
    dense = _fit(X, covariance_type="identity", init="pooled-and-local")
    assert _error(screened.means_, mu, 10) < 0.5 < 1.0 < _error(dense.means_, mu, 10)
    queries = list(screened.communication_["query"])
    assert queries[:5] == ["hello", "units", "family_start", "loglik", "user_start"] and 10 in screened.suspected_outliers_


def _three_groups(d, s, scale, seed):
    """Three components on ``s`` of ``d`` features (signs at random, ``scale`` apart from 0), unequal proportions and
    client sizes, spherical noise of 1.5 (an outside audit's generator)."""
    rng = np.random.default_rng(seed)
    mu = np.zeros((3, d))
    mu[:, :s] = rng.choice([-1, 1], size=(3, s)) * scale
    X = [mu[rng.choice(3, size=n, p=(0.5, 0.3, 0.2))] + 1.5 * rng.normal(size=(n, d))
         for n in (40, 80, 120, 200, 60, 150, 90, 100)]
    return X, mu


def _error_any_labels(means, mu, honest):
    return max(min(np.linalg.norm(m[list(p)] - mu, axis=1).max() for p in itertools.permutations(range(len(mu))))
               for m in means[:honest])


def test_a_client_on_one_point_does_not_capture_the_screened_start():
    """A client of 100 identical rows (zero-imputed data) fits a component on its point beyond what any data
    can: scored by a trimmed mean of the clients' fits, candidates holding that component won (an outside audit:
    error 6.65 against 0.98 clean); by the median client's, they lose."""
    X, mu = _three_groups(300, 10, 2.25, seed=5)
    clean = FederatedGaussianMixture(3, method="sparse-fedgrem", covariance_type="spherical", random_state=0).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        attacked = FederatedGaussianMixture(3, method="sparse-fedgrem", covariance_type="spherical",
                                            random_state=0).fit(X + [np.zeros((100, 300))])
    assert _error_any_labels(attacked.means_, mu, 8) < 1.2 * _error_any_labels(clean.means_, mu, 8) < 1.5


def test_no_feature_standing_out_gives_the_dense_start():
    """Every feature informative (d = 5): no feature's variance stands out from the median's, the screen keeps
    none, and the start is FedGrEM's (an outside audit: k-means on the one largest feature gave 5.08 against
    0.12)."""
    rng = np.random.default_rng(1)
    mu = rng.choice([-1, 1], size=(3, 5)) * 1.5
    X = [mu[rng.choice(3, size=n)] + rng.normal(size=(n, 5)) for n in (40, 80, 120, 200, 60, 150, 90, 100)]
    gm = FederatedGaussianMixture(3, method="sparse-fedgrem", covariance_type="spherical", random_state=0).fit(X)
    assert list(gm.communication_["query"][2:5]) == ["family_start", "step+family_start", "step+local"]
    assert _error_any_labels(gm.means_, mu, 8) < 0.3


def test_the_screened_start_needs_the_features_variances():
    X, _ = _design(d=20, K=4, outlier=False)
    with pytest.raises(ValueError, match="init='screened'.*'identity' or 'spherical'.*got 'diag'"):
        _fit(X, covariance_type="diag", init="screened")
    y = [x[:, 0] for x in X]
    with pytest.raises(ValueError, match="got 'a mixture of regressions'"):
        FederatedMixtureRegression(2, init="screened", random_state=0).fit(X, y)
    spherical = _fit(X, covariance_type="spherical", init="screened")
    assert spherical.support_[:3].all()


def _study():
    """``validation/sparse.py``, loaded under a name of its own (``import sparse`` would depend on ``sys.path``)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("sparse_study", ROOT / "validation" / "sparse.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rate_studys_weak_coordinates_sit_at_the_detection_boundary():
    """``weak`` coordinates carry +-sqrt(2 log d / N), N = K n / 2 (a component's pooled rows), and nothing else
    changes: the rows' noise and labels are those without them (common random numbers)."""
    study = _study()
    X0, m0 = study.make_sparse_gmm(80, n_clients=3, n_samples=40, h=0.0, outlier=False, seed=1)
    X1, m1 = study.make_sparse_gmm(80, n_clients=3, n_samples=40, h=0.0, outlier=False, seed=1, weak=4)
    b = np.sqrt(2 * np.log(80) / (3 * 40 / 2))
    np.testing.assert_allclose(m1 - m0, np.broadcast_to(np.r_[np.zeros(10), np.full(4, b), np.zeros(66)]
                                                        * np.array([[1.0], [-1.0]]), m0.shape))
    diff = np.vstack(X1) - np.vstack(X0)
    np.testing.assert_allclose(np.abs(diff[:, 10:14]), b)
    assert not diff[:, :10].any() and not diff[:, 14:].any()


def test_strong_signals_give_the_support_oracle_and_boundary_signals_cost_more():
    """The rate study's finding (docs/research/sparse.md): every support coordinate far above the threshold, the
    firm-thresholded centre is the support oracle's (no log d); with coordinates at the detection boundary it pays
    for not knowing which (the bound's sqrt(s log d / n))."""
    study = _study()
    strong, strong_oracle = study.centre_error(300, 100, 0, "firm")
    assert abs(strong - strong_oracle) < 0.02, (strong, strong_oracle)
    weak, weak_oracle = study.centre_error(300, 100, 0, "firm", weak=study.S)
    assert weak > 1.5 * weak_oracle, (weak, weak_oracle)
