"""Sparse FedGrEM for mixtures of regressions (issue 64): units per feature, the client step, the screened start,
support recovery against the support oracle, equivariance, errors."""

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from fedmm import FederatedMixtureRegression
from fedmm.algorithms.sparse import damped_gradient_step, sparse_coordinates
from fedmm.algorithms.sparse_start import screen_level, screened_coefficients, spectral_start
from fedmm.data import FederatedData
from fedmm.families import RegressionFamily
from fedmm.families.regression import RegressionStats
from fedmm.units import pooled_moments

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
from sparse_regression import make_sparse_mor, worst_error  # noqa: E402


def _design(d=60, s=3, K=6, n=100, h=0.1, outlier=True, seed=0):
    """``validation/sparse_regression.py``'s design, small: ``K`` clients of ``n`` rows, coefficients +-beta on the
    first ``s`` of ``d`` features, slight per-client differences, a dense outlier client last."""
    return make_sparse_mor(d, s, K, n, h, outlier, seed)


def _fit(X, y, method="sparse-fedgrem", **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FederatedMixtureRegression(2, method=method, random_state=0, **kwargs).fit(X, y)


def test_per_feature_units_scale_each_feature_and_map_back():
    rng = np.random.default_rng(1)
    X = [rng.normal(size=(40, 3)) * [1.0, 10.0, 0.1] + 5.0 for _ in range(2)]
    y = [rng.normal(size=40) * 7 + 3 for _ in range(2)]
    family = RegressionFamily(True, "component", whiten=False)
    units = family.units(pooled_moments(FederatedData.from_input(X, y)))
    assert units.x_map.shape == (3,)                       # a scale per feature: a zero coefficient stays zero
    np.testing.assert_allclose(units.transform(FederatedData.from_input(X, y)).X.std(axis=0), 1.0, rtol=0.05)
    theta = np.array([[[1.0, 0.0, -2.0, 0.5]]])
    original = family.to_original(_params(theta), units).theta
    assert original[0, 0, 1] == 0.0
    np.testing.assert_allclose(family.to_internal(original, units), theta, atol=1e-12)


def _params(theta):
    from fedmm.families import MixtureParams
    return MixtureParams(np.ones(theta.shape[:2]), theta, np.ones(theta.shape[:2] + (1,)))


def test_the_client_step_exists_below_p_rows_and_contracts_where_the_plain_step_diverges():
    """A client with ``N = 40`` rows and ``p = 100`` coefficients: ``G = A / N`` has eigenvalues up to about
    ``(1 + sqrt(p / N))^2 = 6.6``, where the plain gradient step overshoots by ``eta w g > 2``."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 100))
    beta = np.zeros(100)
    beta[:3] = 1.0
    y = X @ beta + 0.1 * rng.normal(size=40)
    stats = RegressionStats(np.array([[40.0]]), (X.T @ X)[None, None], (X.T @ y)[None, None], np.array([[y @ y]]))
    eta, n_k = np.array([[1.0]]), np.array([40.0])
    theta, plain = np.zeros((1, 1, 100)), np.zeros((1, 1, 100))
    for _ in range(60):
        theta = damped_gradient_step(stats, theta, eta, n_k)
        plain = plain + (stats.b - np.einsum("krij,krj->kri", stats.A, plain)) / n_k[:, None, None]
    assert np.linalg.norm(plain) > 1e6                                # the plain step diverges
    residual = stats.b - np.einsum("krij,krj->kri", stats.A, theta)
    assert np.linalg.norm(residual) < 1e-6 * np.linalg.norm(stats.b)  # the damped one reaches a fixed point
    fixed = damped_gradient_step(stats, theta, eta, n_k)
    np.testing.assert_allclose(fixed, theta, atol=1e-9)


def test_the_screen_finds_the_features_of_a_symmetric_mixture_by_their_second_moments():
    """``E[y x_j] = 0`` on every feature of a symmetric mixture: the second-moment contrast finds them."""
    rng = np.random.default_rng(2)
    d = 300
    contrast, first = rng.normal(size=d) * 0.05, rng.normal(size=d) * 0.05
    contrast[[4, 17]] = 0.4                                     # 8 robust sds, above the cut
    assert 4.0 < screen_level(d) < 4.5
    np.testing.assert_array_equal(np.sort(screened_coefficients(contrast, first)), [4, 17])
    first[250] = -0.5                                           # a first moment of either sign
    assert 250 in screened_coefficients(contrast, first)
    flipped = screened_coefficients(contrast, -first)
    np.testing.assert_array_equal(flipped, screened_coefficients(contrast, first))
    assert screened_coefficients(np.zeros(d) + rng.normal(size=d) * 1e-3, np.zeros(d)).size == 1   # the strongest
    np.testing.assert_array_equal(screened_coefficients(np.ones(5), np.ones(5)), np.arange(5))      # few: all


def test_the_spectral_start_puts_two_components_at_plus_and_minus_the_coefficients():
    beta = np.array([1.0, -2.0, 0.5])
    tau2, delta = 1.0 + beta @ beta, 3.0
    D = delta / tau2 ** 2 * np.outer(beta, beta)                 # sum_r w_r beta_r beta_r^T with beta_2 = -beta_1
    start = spectral_start(D, np.zeros(3), delta, tau2, 2, np.random.RandomState(0))
    assert start.shape == (1, 2, 3)
    assert min(np.abs(start[0] - [beta, -beta]).max(), np.abs(start[0] - [-beta, beta]).max()) < 1e-9
    flip = np.array([1.0, -1.0, 1.0])                           # a feature's sign flip flips the start's
    m = np.array([0.2, 0.1, 0.0])
    a = spectral_start(D, m, delta, tau2, 2, np.random.RandomState(0))
    b = spectral_start(flip[:, None] * D * flip, flip * m, delta, tau2, 2, np.random.RandomState(0))
    np.testing.assert_allclose(b, a * flip, atol=1e-12)


def test_support_recovered_near_the_oracle_and_the_outlier_kept_out():
    X, y, coefs = _design()
    sparse = _fit(X, y)
    oracle = _fit([np.vstack(X[:6])[:, :3]], [np.concatenate(y[:6])], method="pooled-em", n_init=3)
    best = np.zeros((2, 60))
    best[:, :3] = oracle.coef_[0]
    err, err_oracle = worst_error(sparse.coef_[:6], coefs), worst_error(np.broadcast_to(best, coefs.shape), coefs)
    assert sparse.support_[:3].all() and sparse.support_[3:].sum() <= 1, np.flatnonzero(sparse.support_)
    assert err < 2.0 * err_oracle and err < 0.5, (err, err_oracle)
    assert 6 in sparse.suspected_outliers_
    assert sparse.support_.shape == (60,) and sparse.history_["support_size"][-1] == sparse.support_.sum()


def test_equivariant_to_rescaling_and_shifting_each_feature_and_y():
    X, y, _ = _design(d=40, K=4, n=100, outlier=False)
    scale, shift = np.linspace(0.2, 30.0, 40) * np.where(np.arange(40) % 3 == 0, -1.0, 1.0), np.linspace(-50, 50, 40)
    c, e = 4.0, -7.0
    a = _fit(X, y)
    b = _fit([x * scale + shift for x in X], [c * t + e for t in y])
    coef = c * a.coef_ / scale
    np.testing.assert_allclose(b.coef_, coef, rtol=1e-6, atol=1e-8 * np.abs(coef).max())
    np.testing.assert_allclose(b.intercept_, c * a.intercept_ + e - coef @ shift, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(b.noise_variance_, c ** 2 * a.noise_variance_, rtol=1e-6)
    np.testing.assert_array_equal(a.support_, b.support_)
    assert a.support_[:3].all()


def test_the_intercept_is_never_thresholded():
    family = RegressionFamily(True, "component", whiten=False)
    assert sparse_coordinates(family, 11) == 10 and sparse_coordinates(RegressionFamily(False), 10) == 10
    X, y, _ = _design(d=30, K=4, outlier=False)
    fit = _fit(X, [t + 0.01 for t in y])          # an intercept far below any threshold stays
    assert np.all(fit.intercept_ != 0.0) and fit.support_.shape == (30,)


def test_the_screened_start_needs_per_feature_units():
    X, y, _ = _design(d=20, K=3, outlier=False)
    with pytest.raises(ValueError, match="init='screened'.*got 'a mixture of regressions'"):
        _fit(X, y, method="fedgrem", init="screened")


@pytest.mark.slow  # 3 s (the grid's start): CI runs it beside the default run (.ci/run), which must stay under 5 minutes
def test_fits_on_flower_as_in_one_process():
    """The start's queries (E-steps at chosen parameters, log-likelihoods) and the clients' proximal step run on
    the clients' side across parties (the step rebuilt from ``client_options``); the sparse step is the server's."""
    flower = pytest.importorskip("fedmm.flower")
    from fedmm.flower.testing import LocalGrid
    X, y, _ = _design(d=12, K=3, n=80)
    ref = _fit(X, y)
    apps = [flower.client_app(lambda ctx, k=k: (X[k], y[k])) for k in range(len(X))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        remote = flower.fit(FederatedMixtureRegression(2, method="sparse-fedgrem", random_state=0), LocalGrid(apps))
    np.testing.assert_allclose(remote.coef_, ref.coef_, rtol=0, atol=1e-8)
    np.testing.assert_array_equal(remote.support_, ref.support_)
