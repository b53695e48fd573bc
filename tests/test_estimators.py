import warnings

import numpy as np
import pytest
from hypothesis import assume, given, strategies as st
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

from fedmm import DivergenceError, FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.methods import METHODS
from fedmm.engine import run_rounds
from fedmm.data import FederatedData
from fedmm.families import GaussianFamily, MixtureParams, RegressionFamily
from fedmm.metrics import best_permutation, estimation_errors
from fedmm.simulate import make_federated_gmm, make_federated_mor

WELL_SEPARATED = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0]])
COEFS = np.array([[4.0, 0.0, -2.0], [-3.0, 3.0, 1.0]])


# --- agreement with scikit-learn ----------------------------------------------------

@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("covariance_type", ["spherical", "diag", "tied", "full"])
def test_one_client_local_em_agrees_with_sklearn(covariance_type, backend):
    """Same model, same MLE: with both run to tol=1e-10 the only gap left is the stopping error.

    Near the optimum EM contracts linearly at rate < 1 (well-separated components: close to 0),
    so a change of the log-likelihood below 1e-10 per sample leaves parameters within ~1e-5 of
    the fixed point; 1e-4 leaves room for both implementations' floating point paths.
    """
    X, _ = make_federated_gmm(1, 600, centers=WELL_SEPARATED, random_state=1)
    ours = FederatedGaussianMixture(3, covariance_type=covariance_type, tol=1e-10, max_iter=1000,
                                    backend=backend, random_state=0).fit(X)
    ref = GaussianMixture(3, covariance_type=covariance_type, tol=1e-10, max_iter=1000,
                          random_state=0).fit(X[0])
    perm = best_permutation(ours.means_[0], ref.means_)
    np.testing.assert_allclose(ours.means_[0][perm], ref.means_, atol=1e-4)
    np.testing.assert_allclose(ours.weights_[0][perm], ref.weights_, atol=1e-4)
    tied = covariance_type == "tied"  # one matrix per client, nothing to permute
    for ours_, ref_ in [(ours.covariances_, ref.covariances_), (ours.precisions_cholesky_, ref.precisions_cholesky_)]:
        np.testing.assert_allclose(ours_[0] if tied else ours_[0][perm], ref_, rtol=1e-3, atol=1e-4)
    assert ours.score(X[0], client=0) == pytest.approx(ref.score(X[0]), abs=1e-8)
    assert ours.bic(X) == pytest.approx(ref.bic(X[0]), rel=1e-8)


# --- recovery of known parameters ---------------------------------------------------

def _bound(n_r, d):
    """4 sqrt(d / n_r): ||mean of n_r N(0, I_d) draws|| exceeds it with probability
    P(chi2_d > 16 d) < 1e-6 for d >= 2; the components are far apart, so overlap bias is negligible."""
    return 4.0 * np.sqrt(d / n_r)


@pytest.mark.parametrize("covariance_type", ["full", "tied"])
@pytest.mark.parametrize("method", ["local-em", "fedgrem"])
def test_known_full_covariances_are_recovered(method, covariance_type):
    """Correlated components; each covariance entry's estimate has sd ``sqrt((S_jj S_ll + S_jl^2) / n_r)``.
    The tolerance is 5 such sd at the component's own sample size (FedGrEM pools and does better)."""
    rng = np.random.RandomState(4)
    A = rng.randn(3, 2, 2)
    cov = A @ np.swapaxes(A, 1, 2) + 0.3 * np.eye(2)
    if covariance_type == "tied":
        cov[:] = cov[0]
    n = 1500
    X = []
    for _ in range(3):
        z = rng.randint(3, size=n)
        X.append(3 * WELL_SEPARATED[z] + np.einsum("nij,nj->ni", np.linalg.cholesky(cov)[z], rng.randn(n, 2)))
    gm = FederatedGaussianMixture(3, method=method, covariance_type=covariance_type, random_state=0).fit(X)
    tied = covariance_type == "tied"
    variances = np.diagonal(cov, axis1=1, axis2=2)
    sd = np.sqrt((variances[:, :, None] * variances[:, None, :] + cov ** 2) / (n if tied else n / 3))
    target, sd = (cov[0], sd[0]) if tied else (cov, sd)
    for k in range(3):
        perm = best_permutation(gm.means_[k], 3 * WELL_SEPARATED)
        fitted = gm.covariances_[k] if tied else gm.covariances_[k][perm]
        assert (np.abs(fitted - target) < 5 * sd).all()


@pytest.mark.parametrize("method", ["local-em", "local-grem"])
def test_gmm_local_recovery(method):
    X, truth = make_federated_gmm(3, 1500, centers=WELL_SEPARATED, h=1.0, random_state=2)
    gm = FederatedGaussianMixture(3, method=method, max_iter=300, tol=1e-6, random_state=0).fit(X)
    w_err, theta_err = estimation_errors(gm.weights_, gm.means_, truth.weights, truth.theta)
    n_r_min = 1500 * truth.weights.min()
    assert theta_err.max() < _bound(n_r_min, 2)
    assert w_err.max() < 4 * np.sqrt(0.25 / 1500)  # binomial proportion: sd <= sqrt(1/(4n))


@pytest.mark.parametrize("method", ["pooled-em", "pooled-grem"])
def test_gmm_pooled_recovery_at_h_zero(method):
    X, truth = make_federated_gmm(4, 500, centers=WELL_SEPARATED, h=0.0, concentration=50.0, random_state=3)
    gm = FederatedGaussianMixture(3, method=method, max_iter=300, tol=1e-6, random_state=0).fit(X)
    np.testing.assert_array_equal(gm.means_[0], gm.means_[3])  # one shared estimate
    perm = best_permutation(gm.means_[0], truth.centers)
    n_r_min = 4 * 500 * truth.weights.mean(axis=0).min()
    assert np.linalg.norm(gm.means_[0][perm] - truth.centers, axis=1).max() < _bound(n_r_min, 2)


@pytest.mark.parametrize("method", ["local-em", "local-grem", "pooled-em"])
def test_mor_recovery(method):
    """Coefficient error of WLS on n_r samples with unit noise and x ~ N(0, I): about sqrt(d / n_r)."""
    h = 0.0 if method.startswith("pooled") else 0.5
    X, y, truth = make_federated_mor(3, 1500, centers=COEFS, h=h, random_state=4)
    mr = FederatedMixtureRegression(2, method=method, fit_intercept=False, n_init=5, max_iter=500, tol=1e-7,
                                    random_state=0).fit(X, y)
    _, theta_err = estimation_errors(mr.weights_, mr.coef_, truth.weights, truth.theta)
    n_r_min = 1500 * truth.weights.min() * (3 if method.startswith("pooled") else 1)
    assert theta_err.max() < _bound(n_r_min, 3)


def test_mor_intercept_and_estimated_noise():
    rng = np.random.RandomState(5)
    X = [rng.randn(2000, 2)]
    z = rng.rand(2000) < 0.4
    y = [np.where(z, 3.0 + X[0] @ [2.0, -1.0], -3.0 + X[0] @ [-2.0, 1.0]) + np.where(z, 0.5, 1.5) * rng.randn(2000)]
    mr = FederatedMixtureRegression(2, noise_variance="component", n_init=5, tol=1e-8, max_iter=500,
                                    random_state=0).fit(X, y)
    r = int(np.argmax(mr.intercept_[0]))
    np.testing.assert_allclose(mr.intercept_[0, [r, 1 - r]], [3.0, -3.0], atol=0.2)
    np.testing.assert_allclose(mr.coef_[0, r], [2.0, -1.0], atol=0.2)
    np.testing.assert_allclose(mr.noise_variance_[0, [r, 1 - r]], [0.25, 2.25], rtol=0.2)
    np.testing.assert_allclose(mr.weights_[0, r], 0.4, atol=0.05)


# --- invariances (hypothesis) -------------------------------------------------------

def _problem(model, seed, K=3, n=60):
    if model == "gmm":
        X, truth = make_federated_gmm(K, n, centers=WELL_SEPARATED, h=0.5, random_state=seed)
        family, data = GaussianFamily("spherical"), FederatedData.from_input(X)
    else:
        X, y, truth = make_federated_mor(K, n, centers=COEFS, h=0.5, random_state=seed)
        family, data = RegressionFamily(False, "component"), FederatedData.from_input(X, y)
    rng = np.random.RandomState(seed)
    R, p = truth.theta.shape[1:]
    start = MixtureParams(rng.dirichlet(np.ones(R) * 5, size=K), truth.theta + 0.3 * rng.randn(K, R, p),
                          np.ones((K, R, 1)))
    return family, data, start


#: D-FedEM on the complete graph: a graph that every relabelling of the clients leaves as it is.
SYMMETRIC = {"d-fedem": dict(graph="complete"), "d-fedgrem": dict(graph="complete")}


@given(model=st.sampled_from(["gmm", "mor"]), method=st.sampled_from(sorted(METHODS)),
       seed=st.integers(0, 100), data_perm=st.permutations(range(2)))
def test_permuting_components_permutes_the_outputs(model, method, seed, data_perm):
    assume(model in METHODS[method].models)
    family, data, start = _problem(model, seed)
    R = start.weights.shape[1]
    perm = np.array(list(data_perm) + list(range(2, R)))
    perms = np.tile(perm, (data.n_clients, 1))
    if method.startswith("pooled"):  # pooled methods share one start
        start = start.broadcast(data.n_clients)
    a = run_rounds(METHODS[method](**SYMMETRIC.get(method, {})), family, data, start, 15, 0.0)
    b = run_rounds(METHODS[method](**SYMMETRIC.get(method, {})), family, data, start.permute(perms), 15, 0.0)
    for x, y in zip(a.params.permute(perms), b.params):
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(a.loglik, b.loglik, rtol=1e-10)


@given(model=st.sampled_from(["gmm", "mor"]), method=st.sampled_from(sorted(METHODS)),
       seed=st.integers(0, 100), order=st.permutations(range(3)))
def test_permuting_clients_permutes_the_outputs(model, method, seed, order):
    assume(model in METHODS[method].models)
    family, data, start = _problem(model, seed)
    if method.startswith("pooled"):
        start = start.broadcast(data.n_clients)
    order = np.array(order)
    Xs = [data.client(k)[0] for k in order]
    ys = None if data.y is None else [data.client(k)[1] for k in order]
    shuffled = FederatedData.from_input(Xs, ys)
    a = run_rounds(METHODS[method](**SYMMETRIC.get(method, {})), family, data, start, 15, 0.0)
    b = run_rounds(METHODS[method](**SYMMETRIC.get(method, {})), family, shuffled, start.take(order), 15, 0.0)
    for x, y in zip(a.params.take(order), b.params):
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-10)  # pooled sums change order: rounding only


# --- the scikit-learn contract ------------------------------------------------------

def test_get_set_params_and_clone():
    gm = FederatedGaussianMixture(4, method=METHODS["pooled-grem"](C_eta=0.8), random_state=3)
    assert gm.get_params()["method__C_eta"] == 0.8
    gm.set_params(n_components=2, method__C_eta=0.7)
    twin = clone(gm)
    assert twin.method is not gm.method and twin.method.C_eta == 0.7
    assert {k: v for k, v in twin.get_params().items() if k != "method"} == \
        {k: v for k, v in gm.get_params().items() if k != "method"}
    mr = clone(FederatedMixtureRegression(3, noise_variance="shared"))
    assert mr.get_params()["noise_variance"] == "shared"


def test_fit_is_reproducible_and_fit_predict_matches_predict():
    X, _ = make_federated_gmm(3, 120, centers=WELL_SEPARATED, random_state=6)
    a = FederatedGaussianMixture(3, n_init=2, random_state=7)
    labels = a.fit_predict(X)
    b = FederatedGaussianMixture(3, n_init=2, random_state=7).fit(X)
    np.testing.assert_array_equal(a.means_, b.means_)
    for la, lb in zip(labels, b.predict(X)):
        np.testing.assert_array_equal(la, lb)


def test_evaluation_layouts_agree():
    X, _ = make_federated_gmm(3, 50, centers=WELL_SEPARATED, random_state=8)
    gm = FederatedGaussianMixture(3, random_state=0).fit(X)
    per_list = gm.predict_proba(X)
    assert [p.shape for p in per_list] == [(50, 3)] * 3
    np.testing.assert_allclose(gm.predict_proba(X[1], client=1), per_list[1])
    groups = np.repeat([0, 1, 2], 50)
    shuffle = np.random.RandomState(0).permutation(150)
    stacked = np.concatenate(X)[shuffle]
    np.testing.assert_allclose(gm.score_samples(stacked, groups=groups[shuffle]),
                               np.concatenate(gm.score_samples(X))[shuffle])
    assert gm.score(X) == pytest.approx(np.concatenate(gm.score_samples(X)).mean())
    assert gm.score(X) == pytest.approx(gm.lower_bound_)


def test_groups_fit_uses_the_group_labels_as_client_ids():
    X, _ = make_federated_gmm(2, 60, centers=WELL_SEPARATED, random_state=9)
    groups = np.repeat(["north", "south"], 60)
    gm = FederatedGaussianMixture(3, random_state=0).fit(np.concatenate(X), groups=groups)
    np.testing.assert_array_equal(gm.client_ids_, ["north", "south"])
    assert gm.predict(X[1], client="south").shape == (60,)
    with pytest.raises(ValueError, match="Unknown client id"):
        gm.predict(X[1], client="east")


def test_mor_predict_is_the_prior_weighted_mean():
    X, y, _ = make_federated_mor(2, 200, centers=COEFS, random_state=10)
    mr = FederatedMixtureRegression(2, n_init=3, random_state=0).fit(X, y)
    expected = X[1] @ np.einsum("r,rp->p", mr.weights_[1], mr.coef_[1]) + mr.weights_[1] @ mr.intercept_[1]
    np.testing.assert_allclose(mr.predict(X[1], client=1), expected)
    proba = mr.predict_proba(X, y)
    np.testing.assert_allclose(proba[0].sum(axis=1), 1.0)


def test_bic_counts_one_parameter_set_per_client_for_local_methods():
    X, _ = make_federated_gmm(3, 100, centers=WELL_SEPARATED, random_state=11)
    family_params = GaussianFamily("identity").n_parameters(3, 2)
    n = 300
    for method, sets in [("local-em", 3), ("pooled-em", 1)]:
        gm = FederatedGaussianMixture(3, method=method, covariance_type="identity", random_state=0).fit(X)
        loglik = np.concatenate(gm.score_samples(X)).sum()
        assert gm.bic(X) == pytest.approx(-2 * loglik + sets * family_params * np.log(n))
        assert gm.aic(X) == pytest.approx(-2 * loglik + 2 * sets * family_params)


def test_mixture_regression_estimators_need_y():
    with pytest.raises(ValueError, match="y is required"):
        FederatedMixtureRegression(2).fit([np.ones((5, 2))], None)


# --- bad input and bad runs ---------------------------------------------------------

def test_bad_input_names_the_client():
    X, _ = make_federated_gmm(3, 30, centers=WELL_SEPARATED, random_state=12)
    X[2] = X[2].copy()
    X[2][5, 1] = np.nan
    with pytest.raises(ValueError, match="client 2: X contains NaN"):
        FederatedGaussianMixture(3).fit(X)
    with pytest.raises(ValueError, match=r"same number of features, 2 .*client 1 has 3"):
        FederatedGaussianMixture(3).fit([X[0], np.ones((10, 3))])
    with pytest.raises(ValueError, match="client 1 has no samples"):
        FederatedGaussianMixture(3).fit([X[0], np.empty((0, 2))])


def test_fewer_samples_than_components():
    X, _ = make_federated_gmm(2, 30, centers=WELL_SEPARATED, random_state=13)
    small = [X[0], X[1][:2]]
    with pytest.raises(ValueError, match=r"client 1 \(n=2\) has fewer samples than n_components=3"):
        FederatedGaussianMixture(3, method="local-em").fit(small)
    with pytest.warns(UserWarning, match="client 1"):
        FederatedGaussianMixture(3, method="pooled-em", random_state=0).fit(small)


@pytest.mark.parametrize("name, value", [("n_components", 0), ("n_init", 0), ("max_iter", 1.5), ("tol", -1.0),
                                         ("C_eta", 0.0), ("method", "fedavg")])
def test_bad_hyperparameters(name, value):
    X, _ = make_federated_gmm(1, 30, centers=WELL_SEPARATED, random_state=0)
    with pytest.raises(ValueError, match=name):
        FederatedGaussianMixture(3).set_params(**{name: value}).fit(X)


def test_evaluation_input_errors():
    X, _ = make_federated_gmm(2, 30, centers=WELL_SEPARATED, random_state=0)
    gm = FederatedGaussianMixture(3, random_state=0).fit(X)
    with pytest.raises(ValueError, match="client= or groups=|client=<id>"):
        gm.predict(X[0])
    with pytest.raises(ValueError, match="fitted on 2 clients"):
        gm.predict(X[:1])
    with pytest.raises(ValueError, match=r"client 0: X has 3 features, but FederatedGaussianMixture is expecting 2"):
        gm.predict(np.ones((4, 3)), client=0)


def test_a_step_size_that_must_overshoot_is_refused():
    X, _ = make_federated_gmm(2, 200, centers=WELL_SEPARATED * 100, random_state=14)
    with pytest.raises(ValueError, match=r"C_eta must be a number in \(0, 2\)"):
        FederatedGaussianMixture(3, method=METHODS["local-grem"](C_eta=50.0)).fit(X)


def test_a_diverging_gradient_run_raises_with_advice():
    """One regression component on two clients whose features differ in scale (3 and 0.1). After the
    pooled whitening, client 0's design moment ``A / n`` is about 2, so the paper's plain step with
    ``C_eta = 1.9`` multiplies the error by ``|1 - 1.9 * 2| = 2.8`` every round; the preconditioned step
    contracts by ``|1 - 1.9| = 0.9``."""
    rng = np.random.RandomState(14)
    X = [rng.randn(200, 1) * 3.0, rng.randn(200, 1) * 0.1]
    y = [2.0 * Xk[:, 0] + 0.1 * rng.randn(200) for Xk in X]
    options = dict(method=METHODS["local-grem"](C_eta=1.9), max_iter=3000, coef_init=[[0.0]], random_state=0)
    with pytest.raises(DivergenceError, match="lower C_eta"):
        FederatedMixtureRegression(1, precondition=False, **options).fit(X, y)
    mr = FederatedMixtureRegression(1, **options).fit(X, y)
    np.testing.assert_allclose(mr.coef_[:, 0, 0], 2.0, atol=0.25)  # client 1: standard error 0.1 / (0.1 sqrt(200)) = 0.07


def test_convergence_warning():
    X, _ = make_federated_gmm(2, 100, centers=WELL_SEPARATED, random_state=15)
    with pytest.warns(ConvergenceWarning, match="did not converge in max_iter=1"):
        gm = FederatedGaussianMixture(3, max_iter=1, random_state=0).fit(X)
    assert not gm.converged_ and gm.n_iter_ == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert FederatedGaussianMixture(3, random_state=0).fit(X).converged_


def test_fedem_counts_shared_components_once_and_proportions_per_client():
    X, _ = make_federated_gmm(3, 100, centers=WELL_SEPARATED, random_state=16)
    gm = FederatedGaussianMixture(3, method="fedem", covariance_type="identity", random_state=0).fit(X)
    loglik = np.concatenate(gm.score_samples(X)).sum()
    expected = 3 * 2 + 3 * 2  # proportions (R - 1) per client, means R d once
    assert gm.bic(X) == pytest.approx(-2 * loglik + expected * np.log(300))


def test_precisions_are_the_inverse_covariances_as_in_scikit_learn():
    X, _ = make_federated_gmm(3, 100, centers=WELL_SEPARATED, random_state=0)
    for kind in ("spherical", "diag", "tied", "full"):
        gm = FederatedGaussianMixture(3, covariance_type=kind, max_iter=30, random_state=0).fit(X)
        product = gm.covariances_ @ gm.precisions_ if kind in ("tied", "full") else gm.covariances_ * gm.precisions_
        identity = np.eye(2) if kind in ("tied", "full") else 1.0
        np.testing.assert_allclose(product, np.broadcast_to(identity, product.shape), atol=1e-10)


@pytest.mark.parametrize("method", ["fedgrem", "local-em", "pooled-em"])
def test_warm_start_refits_from_the_last_fit(method):
    """scikit-learn's ``warm_start``: a refit starts from the last fit's proportions and components, so it
    returns to the same fixed point (to the tolerance) in fewer rounds than the first fit took; other clients or another
    ``n_components`` are an error, not a silent cold start."""
    X, _ = make_federated_gmm(3, 150, random_state=6)
    gm = FederatedGaussianMixture(5, method=method, init="family" if method != "fedgrem" else "auto", n_init=1,
                                  warm_start=True, tol=1e-6, max_iter=2000, random_state=0)
    last, rounds = gm.fit(X).means_.copy(), gm.n_iter_
    gm.fit(X)
    assert gm.n_iter_ < rounds and np.abs(gm.means_ - last).max() < 0.01
    with pytest.raises(ValueError, match="warm_start=True refits the last fit's 3 clients"):
        gm.fit(X[:2])
    with pytest.raises(ValueError, match="n_components=2"):
        gm.set_params(n_components=2).fit(X)
