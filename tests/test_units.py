"""Equivariance: a user who changes units gets the same answer, mapped back (docs/units.md)."""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.methods import METHODS
from fedmm.data import FederatedData
from fedmm.families import GaussianFamily, MixtureParams, RegressionFamily
from fedmm.simulate import make_federated_gmm, make_federated_mor
from fedmm.units import Units, pooled_moments

CENTERS = np.array([[0.0, 0.0], [6.0, 1.0], [1.0, 7.0]])
COEFS = np.array([[2.0, -1.0], [-2.0, 2.0]])
FIT = dict(max_iter=40, n_init=1, random_state=0)
scales = st.floats(1e-2, 1e2)
shifts = st.floats(-1e3, 1e3)


def _gmm_clients(seed=0, K=3, n=80):
    rng = np.random.RandomState(seed)
    return [CENTERS[rng.randint(3, size=n)] + rng.randn(n, 2) * [1.0, 0.5] for _ in range(K)]


def _mor_clients(seed=0, K=3, n=120):
    rng = np.random.RandomState(seed)
    X = [rng.randn(n, 2) * [1.0, 3.0] + [2.0, -1.0] for _ in range(K)]
    z = [rng.randint(2, size=n) for _ in range(K)]
    y = [np.einsum("ij,ij->i", Xk, COEFS[zk]) + 1.5 * zk + 0.3 * rng.randn(n) for Xk, zk in zip(X, z)]
    return X, y


def _fit_quietly(estimator, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        return estimator.fit(*args)


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("covariance_type", ["diag", "spherical"])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=scales, a2=scales, b=shifts)
def test_gaussian_mixtures_are_equivariant_to_scale_and_shift(method, covariance_type, a, a2, b):
    """Diagonal covariances: any per-feature scale; spherical ones: one scale for all features."""
    X = _gmm_clients()
    scale = np.array([a, a2] if covariance_type == "diag" else [a, a])
    mapped = [Xk * scale + [b, -b / 3] for Xk in X]
    b = np.array([b, -b / 3])
    make = lambda: FederatedGaussianMixture(3, method=method, covariance_type=covariance_type, **FIT)  # noqa: E731
    ref, new = _fit_quietly(make(), X), _fit_quietly(make(), mapped)
    for labels, labels_new in zip(ref.predict(X), new.predict(mapped)):
        np.testing.assert_array_equal(labels, labels_new)
    np.testing.assert_allclose(new.weights_, ref.weights_, rtol=1e-6, atol=1e-9)
    size = np.abs(scale).max() * 10 + np.abs(b).max()
    np.testing.assert_allclose(new.means_, ref.means_ * scale + b, rtol=1e-6, atol=1e-7 * size)
    var_scale = scale ** 2 if covariance_type == "diag" else a ** 2
    np.testing.assert_allclose(new.covariances_, ref.covariances_ * var_scale, rtol=1e-5)
    np.testing.assert_allclose(new.center_, ref.center_ * scale + b, rtol=1e-6, atol=1e-7 * size)
    if method == "fedgrem":  # the outlier test and the pooling work in noise units
        np.testing.assert_allclose(new.outlier_scores_, ref.outlier_scores_, rtol=1e-5, atol=1e-9)
        np.testing.assert_array_equal(new.pooled_, ref.pooled_)
    # Log-likelihoods move by the Jacobian only.
    np.testing.assert_allclose(new.log_likelihood_, ref.log_likelihood_ - np.log(scale).sum(), rtol=1e-6, atol=1e-6)
    # A new client (personalize) too: its proportions, components and labels. Its proportions' EM stops where
    # its log-likelihood per sample moves by less than tol (1e-3), so the two paths agree to that order, not 1e-6.
    unseen = X[0][::2] + 0.3
    mine, theirs = ref.personalize(unseen), new.personalize(unseen * scale + b)
    np.testing.assert_allclose(theirs.weights_, mine.weights_, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(theirs.params_.theta, mine.params_.theta * scale + b, rtol=1e-4, atol=1e-5 * size)
    np.testing.assert_array_equal(theirs.predict(unseen * scale + b), mine.predict(unseen))


@pytest.mark.parametrize("method", sorted(METHODS))
@settings(max_examples=4, deadline=None)
@given(b=shifts)
def test_the_papers_identity_model_is_equivariant_to_shifts(method, b):
    X = _gmm_clients(1)
    make = lambda: FederatedGaussianMixture(3, method=method, covariance_type="identity", **FIT)  # noqa: E731
    ref, new = _fit_quietly(make(), X), _fit_quietly(make(), [Xk + b for Xk in X])
    np.testing.assert_allclose(new.means_, ref.means_ + b, rtol=1e-7, atol=1e-8 * (1 + abs(b)))
    np.testing.assert_allclose(new.weights_, ref.weights_, atol=1e-7)


# Every step of these methods is rotation-equivariant, so with whitened units (regressions) they follow any
# invertible linear map of the features; the others compare clients coordinate by coordinate (the median in
# the consensus alignment and in the local methods' centre), so they follow per-feature maps (docs/units.md).
ROTATION_EQUIVARIANT = ("pooled-em", "pooled-grem")


def _affine(method, seed, rotations=True):
    """A per-feature map of any scale and sign, or any invertible matrix for the rotation-equivariant methods
    (``rotations``: where the family's units follow one)."""
    rng = np.random.RandomState(seed)
    B = np.diag(10.0 ** rng.uniform(-2, 2, size=2) * rng.choice([-1, 1], size=2))
    if rotations and method in ROTATION_EQUIVARIANT:
        B = B + rng.randn(2, 2) * np.abs(B).max()
        B += np.eye(2) * 3 * np.abs(B).max()          # invertible, of arbitrary scale
    return B


@pytest.mark.parametrize("method, options", [(m, {}) for m in sorted(METHODS)]
                         + [("fedgrem", {"pool_variances": "robust"}), ("fedgrem", {"pooling_sizes": "client"})])
@pytest.mark.parametrize("covariance_type", ["tied", "full"])
@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2 ** 16), b=shifts)
def test_full_and_tied_covariances_are_equivariant_to_affine_maps(method, options, covariance_type, seed, b):
    """``x -> x B + b`` for a per-feature ``B`` of any signs: ``mu -> mu B + b``, ``Sigma -> B^T Sigma B``,
    log-likelihoods move by ``-log|det B|``. The standardization turns it into sign flips of the internal
    coordinates, which the coordinate-wise medians and the log-Euclidean distances follow. (The likelihood
    would follow any invertible ``B``; the k-means start, in standardized features, does not.)"""
    X = _gmm_clients(2)
    B = _affine(method, seed, rotations=False)
    shift = np.array([b, -b / 3])
    mapped = [Xk @ B + shift for Xk in X]
    make = lambda: FederatedGaussianMixture(3, method=METHODS[method](**options),  # noqa: E731
                                            covariance_type=covariance_type, **FIT)
    ref, new = _fit_quietly(make(), X), _fit_quietly(make(), mapped)
    for labels, labels_new in zip(ref.predict(X), new.predict(mapped)):
        np.testing.assert_array_equal(labels, labels_new)
    np.testing.assert_allclose(new.weights_, ref.weights_, rtol=1e-6, atol=1e-9)
    means = ref.means_ @ B + shift
    np.testing.assert_allclose(new.means_, means, rtol=1e-6, atol=1e-7 * np.abs(means).max())
    covariances = np.swapaxes(B, 0, 1) @ ref.covariances_ @ B
    np.testing.assert_allclose(new.covariances_, covariances, rtol=1e-5, atol=1e-7 * np.abs(covariances).max())
    np.testing.assert_allclose(new.log_likelihood_, ref.log_likelihood_ - np.log(abs(np.linalg.det(B))),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("method, options", [(m, {}) for m in sorted(METHODS) if "mor" in METHODS[m].models]
                         + [("fedgrem", {"pooling_sizes": "client"})])
@pytest.mark.parametrize("noise_variance", ["component", "shared"])
@settings(max_examples=4, deadline=None)
@given(c=scales, e=shifts, seed=st.integers(0, 2 ** 16), b=st.floats(-100, 100))
def test_mixtures_of_regressions_are_equivariant_to_affine_maps(method, options, noise_variance, c, e, seed, b):
    """``X -> X B + b`` (``B`` diagonal, or any invertible matrix for the rotation-equivariant methods),
    ``y -> c y + e``: ``coef -> c B^-1 coef``, ``intercept -> c intercept + e - b . coef'``,
    ``noise variance -> c^2 noise variance``."""
    X, y = _mor_clients()
    B = _affine(method, seed)
    Xm, ym = [Xk @ B + b for Xk in X], [c * yk + e for yk in y]
    make = lambda: FederatedMixtureRegression(2, method=METHODS[method](**options),  # noqa: E731
                                              noise_variance=noise_variance, **FIT)
    ref, new = _fit_quietly(make(), X, y), _fit_quietly(make(), Xm, ym)
    for p, p_new in zip(ref.predict_proba(X, y), new.predict_proba(Xm, ym)):
        np.testing.assert_array_equal(p.argmax(axis=1), p_new.argmax(axis=1))
    np.testing.assert_allclose(new.weights_, ref.weights_, rtol=1e-6, atol=1e-9)
    coef = c * np.linalg.solve(B, ref.coef_[..., None])[..., 0]
    np.testing.assert_allclose(new.coef_, coef, rtol=1e-5, atol=1e-6 * np.abs(coef).max())
    intercept = c * ref.intercept_ + e - coef @ np.full(2, b)
    np.testing.assert_allclose(new.intercept_, intercept, rtol=1e-5, atol=1e-6 * (abs(e) + abs(c) * 10))
    np.testing.assert_allclose(new.noise_variance_, c ** 2 * ref.noise_variance_, rtol=1e-5)


@pytest.mark.parametrize("family", [GaussianFamily("full"), GaussianFamily("tied"),
                                    GaussianFamily("diag"), GaussianFamily("spherical"), GaussianFamily("identity"),
                                    RegressionFamily(True, "component"), RegressionFamily(False, "shared"),
                                    RegressionFamily(True, 2.0)])
def test_units_map_parameters_there_and_back(family):
    rng = np.random.RandomState(3)
    X = [rng.randn(50, 3) * [1.0, 10.0, 0.1] + 5.0 for _ in range(2)]
    y = [rng.randn(50) * 7 + 3 for _ in range(2)] if family.needs_y else None
    data = FederatedData.from_input(X, y)
    units = family.units(pooled_moments(data))
    standard = units.transform(data)
    centred = not (isinstance(family, GaussianFamily) and family.covariance_type == "identity") and (
        isinstance(family, GaussianFamily) or family.fit_intercept)
    if centred:
        np.testing.assert_allclose(standard.X.mean(axis=0), 0.0, atol=1e-9)
    theta = rng.randn(2, 3, family.param_dim(3))
    internal = family.to_internal(theta, units)
    full = isinstance(family, GaussianFamily) and family.covariance_type in ("full", "tied")
    scale = np.tile(np.eye(3).ravel(), (2, 3, 1)) if full else np.ones((2, 3, 1))
    original = family.to_original(MixtureParams(np.full((2, 3), 1 / 3), internal, scale), units)
    np.testing.assert_allclose(original.theta, theta, rtol=1e-9, atol=1e-9)
    if full:  # unit internal covariance is the diagonal of the features' pooled variances
        sd = np.concatenate(X).std(axis=0)
        np.testing.assert_allclose(original.scale[0, 0].reshape(3, 3), np.diag(sd ** 2), rtol=1e-9, atol=1e-12)


def test_whitened_regression_design_has_unit_second_moment():
    rng = np.random.RandomState(4)
    X = [rng.randn(200, 3) @ np.array([[3.0, 1.0, 0.0], [0.0, 0.1, 0.0], [1.0, 0.0, 50.0]]) for _ in range(2)]
    data = FederatedData.from_input(X, [rng.randn(200) for _ in range(2)])
    standard = RegressionFamily(True, "component").units(pooled_moments(data)).transform(data)
    # The moments come from sums (X^T X / n - mean mean^T); condition number 2.5e5 here.
    np.testing.assert_allclose(np.cov(standard.X.T, bias=True), np.eye(3), atol=1e-6)


def test_log_likelihood_is_reported_in_the_data_units():
    X = [Xk * 1000.0 for Xk in _gmm_clients(2)]
    gm = _fit_quietly(FederatedGaussianMixture(3, method="fedgrem", **FIT), X)
    np.testing.assert_allclose(gm.log_likelihood_, [gm.score(Xk, client=k) for k, Xk in enumerate(X)], rtol=1e-9)
    X, y = _mor_clients(3)
    y = [100 * yk for yk in y]
    mr = _fit_quietly(FederatedMixtureRegression(2, method="pooled-em", **FIT), X, y)
    np.testing.assert_allclose(mr.log_likelihood_, [mr.score(Xk, yk, client=k) for k, (Xk, yk)
                                                    in enumerate(zip(X, y))], rtol=1e-9)


@pytest.mark.parametrize("scale", [1e-13, 1e15])
def test_extreme_units_give_the_same_fit(scale):
    """Found in review: a feature counted as constant when its standard deviation was below 1e-12 in
    absolute terms, so data in units of 1e-13 were not scaled and reg_covar swamped them (ARI 0)."""
    X = _gmm_clients(4)
    make = lambda: FederatedGaussianMixture(3, method="fedgrem", **FIT)  # noqa: E731
    ref, new = _fit_quietly(make(), X), _fit_quietly(make(), [Xk * scale for Xk in X])
    for labels, labels_new in zip(ref.predict(X), new.predict([Xk * scale for Xk in X])):
        np.testing.assert_array_equal(labels, labels_new)
    np.testing.assert_allclose(new.means_ / scale, ref.means_, rtol=1e-6, atol=1e-9)


def test_float32_data_stay_float32_in_standard_units_and_their_moments_are_summed_in_float64():
    """Far from 0 in float32 (mean 1e4, sd 1), the variance sum_xx / n - mean^2 cancels 8 digits: float32
    sums would leave noise of order 10 in a variance of 1."""
    X = (1e4 + np.random.RandomState(0).randn(100_000, 2)).astype(np.float32)
    data = FederatedData.from_input([X[:60_000], X[60_000:]])
    moments = pooled_moments(data)
    exact = X.astype(np.float64).var(axis=0)
    np.testing.assert_allclose(moments.second - moments.mean ** 2, exact, rtol=1e-6)
    standard = Units(moments.mean, 1 / np.sqrt(exact)).transform(data)
    assert standard.X.dtype == np.float32
    np.testing.assert_allclose(standard.X.std(axis=0, dtype=np.float64), 1.0, rtol=1e-3)


@pytest.mark.parametrize("method", ["fedgrem", "fedem", "local-em", "pooled-em"])
def test_float32_input_gives_the_float64_fit_to_float32_precision(method):
    """Storage in float32 (scikit-learn's KMeans keeps float32 too): the kernels sum in float64, so the
    fit differs from the float64 one by the rounding of the data (about 1e-7 relative) carried through
    the iterations, well inside 1e-4."""
    X, truth = make_federated_gmm(6, 200, centers=np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]]), h=0.3,
                                  random_state=0)
    X = [1e3 + 10 * x for x in X]
    fit = lambda data: FederatedGaussianMixture(3, method=method, random_state=0).fit(data)  # noqa: E731
    a, b = fit(X), fit([x.astype(np.float32) for x in X])
    np.testing.assert_allclose(b.means_, a.means_, rtol=1e-4)
    np.testing.assert_allclose(b.weights_, a.weights_, atol=1e-4)
    Xr, y, _ = make_federated_mor(6, 200, random_state=0)
    fit = lambda data: FederatedMixtureRegression(2, method=method, random_state=0).fit(data, y)  # noqa: E731
    a, b = fit(Xr), fit([x.astype(np.float32) for x in Xr])
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-3, atol=1e-4)


@settings(max_examples=6, deadline=None)
@given(a=scales, a2=scales, b=shifts, c=scales, e=shifts)
def test_the_sure_penalty_is_chosen_in_noise_units(a, a2, b, c, e):
    """penalty="sure" picks lambda from distances and soft counts in noise units: the same choices, the
    same pooling and the same estimates mapped back whatever the units of X (and y)."""
    scale, shift = np.array([a, a2]), np.array([b, -b / 3])
    X = _gmm_clients(K=6)
    make = lambda: FederatedGaussianMixture(3, method=METHODS["fedgrem"](penalty="sure"), **FIT)  # noqa: E731
    ref, new = _fit_quietly(make(), X), _fit_quietly(make(), [Xk * scale + shift for Xk in X])
    np.testing.assert_allclose(new.history_["penalty"], ref.history_["penalty"], rtol=1e-9)
    np.testing.assert_array_equal(new.pooled_, ref.pooled_)
    np.testing.assert_allclose(new.means_, ref.means_ * scale + shift, rtol=1e-6,
                               atol=1e-7 * (10 * scale.max() + abs(b)))
    Xr, y = _mor_clients(K=6)
    make = lambda: FederatedMixtureRegression(2, method=METHODS["fedgrem"](penalty="sure"), **FIT)  # noqa: E731
    ref = _fit_quietly(make(), Xr, y)
    new = _fit_quietly(make(), [Xk * scale + shift for Xk in Xr], [c * yk + e for yk in y])
    np.testing.assert_allclose(new.history_["penalty"], ref.history_["penalty"], rtol=1e-9)
    np.testing.assert_array_equal(new.pooled_, ref.pooled_)
    np.testing.assert_allclose(new.coef_, ref.coef_ * c / scale, rtol=1e-5, atol=1e-7 * abs(c) / scale.min())
