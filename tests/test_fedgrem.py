import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import experimental_fedgrem

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.methods import METHODS, FedGrEM
from fedmm.algorithms.central import central_update
from fedmm.engine import run_rounds
from fedmm.algorithms.fedgrem import penalty_schedule, settle_penalty
from fedmm.algorithms import variances as variances_module
from fedmm.data import FederatedData
from fedmm.families import GaussianFamily, MixtureParams
from fedmm.metrics import estimation_errors
from fedmm.simulate import make_federated_gmm, make_federated_mor

CENTERS = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])


def _start(truth, rng, spread=0.5):
    K, R, p = truth.theta.shape
    return MixtureParams(np.full((K, R), 1.0 / R), truth.theta + spread * rng.randn(K, R, p), np.ones((K, R, 1)))


@pytest.mark.parametrize("options", [{}, {"centre_margins": True}, {"shrinkage": "linear"}])
def test_infinite_penalty_is_gradient_fedem(options):
    """Sec. 2.3: with lambda = +inf FedGrEM is the gradient version of FedEM: every round, local
    gradient steps, then the server's n_k-weighted mean of the clients' parameters (centre margins and
    linear shrinkage, fedmm's, leave it so)."""
    X, truth = make_federated_gmm(4, [80, 120, 100, 60], centers=CENTERS, h=0.5, random_state=0)
    data, family = FederatedData.from_input(X), GaussianFamily()
    start = _start(truth, np.random.RandomState(0))
    strategy = experimental_fedgrem(penalty=np.inf, center_restarts=0, **options)
    fed = run_rounds(strategy, family, data, start, 25, 0.0)

    n_k = data.n_samples.astype(float)
    params, w0 = start, np.maximum(start.weights, 1 / n_k[:, None])
    for _ in range(25):  # the reference, written out
        _, stats = family.estep(data, params)
        w = stats.N / n_k[:, None]
        eta = 1.0 / np.maximum(w0, w)
        theta = params.theta + eta[..., None] * (stats.Sx - stats.N[..., None] * params.theta) / n_k[:, None, None]
        mean = (n_k[:, None, None] * theta).sum(0) / n_k.sum()
        params = MixtureParams(w, np.broadcast_to(mean, theta.shape).copy(), params.scale)
    np.testing.assert_allclose(fed.params.theta, params.theta, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fed.params.weights, params.weights, rtol=1e-10)
    assert fed.diagnostics.pooled.all()


@pytest.mark.parametrize("pooling_sizes, meets", [("information", True), ("client", False)])
def test_fully_pooled_clients_meet_at_pooled_ems_fixed_point_with_information_weights(pooling_sizes, meets):
    """Clients whose proportions differ, all pooled (lambda = inf, the paper's step C_eta / w^[0]): with
    pooling_sizes="information" the centre is the M-step of the summed statistics, sum_k Sx_kr / sum_k N_kr,
    each client counting by the responsibilities it holds. The paper's n_k counts a client with few samples
    of a component as much as one with many, and misses it."""
    X, truth = make_federated_gmm(4, [80, 120, 100, 60], centers=CENTERS, concentration=1.0, random_state=2)
    data, family = FederatedData.from_input(X), GaussianFamily()
    start = _start(truth, np.random.RandomState(2))._replace(weights=truth.weights)
    strategy = METHODS["fedgrem"](penalty=np.inf, center_restarts=0, eta_rule="initial",
                             pooling_sizes=pooling_sizes)
    fit = run_rounds(strategy, family, data, start, 5000, 1e-13)
    _, stats = family.estep(data, fit.params)
    pooled_m_step = stats.Sx.sum(0) / stats.N.sum(0)[:, None]
    assert np.allclose(fit.params.theta[0], pooled_m_step, rtol=1e-7, atol=1e-9) == meets


def test_centre_margins_pool_a_drifted_component_back_onto_its_own_centre():
    """A client's component that drifted next to another component's centre (margin 0) is left unpooled by
    the paper's problem; with centre margins it is pooled onto its own centre and counts for nothing in it,
    and every block counts in the centre by its margin."""
    rng = np.random.RandomState(0)
    theta = np.array([[0.0, 0.0], [6.0, 0.0]]) + 0.1 * rng.randn(6, 2, 2)
    theta[0, 0] = [5.0, 0.5]
    n_k, lam = np.full(6, 100.0), 5.0
    solve = dict(weights=None, metric=None, tol=1e-12, max_iter=1000)
    paper = central_update(theta, n_k, lam, **solve)
    assert not paper.pooled[0, 0] and paper.pooled[1:].all()
    experiment = experimental_fedgrem(centre_margins=True)
    guarded, margin = experiment._with_margins(paper, theta, n_k, None, lam, solve)
    assert margin[0, 0] == sys.modules[type(experiment).__module__].MARGIN_FLOOR and np.all(margin[1:] > 0.9)
    assert guarded.pooled.all()
    np.testing.assert_allclose(guarded.nu[0, 0], guarded.center[0])
    expected = (margin[:, :, None] * theta).sum(0) / margin.sum(0)[:, None]
    np.testing.assert_allclose(guarded.center, expected, atol=1e-9)
    assert np.linalg.norm(guarded.center[0] - theta[1:, 0].mean(0)) < 0.01


@pytest.mark.parametrize("weighted, inflated", [(True, False), (False, True)])
def test_a_drifted_component_does_not_enter_the_pooled_variance(weighted, inflated, monkeypatch):
    """Client 0's component 0 starts on component 1's centre: it takes component 1's samples (margin 0),
    and is pooled onto component 0's centre. Its variance at that centre (the squared distance between
    the two, 36) must not enter the pooled variance that the others take: a block counts there by its
    margin, as in the centre. Counted in full (``weighted=False``) it makes the pooled variance 4.4, not 0.9.
    Atypical variances are also kept out on their own (``variances._typical``, the threat model's defence):
    switched off here, to see the margins' part."""
    monkeypatch.setattr(variances_module, "_typical", lambda scale: np.ones(scale.shape[:2]))
    X, truth = make_federated_gmm(4, 200, centers=CENTERS, random_state=3)
    data, family = FederatedData.from_input(X), GaussianFamily("diag")
    theta = truth.theta.copy()
    theta[0, 0] = CENTERS[1] + 0.3
    start = MixtureParams(truth.weights, theta, np.ones((4, 3, 2)))
    strategy = experimental_fedgrem(centre_margins=True)
    messages, _ = strategy.client_step(family, data, strategy.client_start(start, data.n_samples.astype(float)),
                                       strategy.server_start(family, start, data.n_samples.astype(float))[0])
    if not weighted:  # every block's size in the pooled variance, as before margins
        margin_free = np.ones((4, 3))
        strategy._with_margins = lambda central, *a, _f=strategy._with_margins: (_f(central, *a)[0], margin_free)
    params, grouped, *_ = strategy._pool(messages, family, 8.0, 8.0, 1, False, 8.0, (np.nan, np.nan, 0.0),
                                         start.weights)
    assert grouped.central.pooled[:, 0].all()
    assert (params.scale[1:, 0].max() > 1.6) == inflated


def test_information_weights_bound_a_components_pull_on_the_centre():
    """pooling_sizes="information": weights n_k w_kr^[0] R, thresholds the paper's lambda / sqrt(n_k) up to a
    component's equal share and lambda / (sqrt(n_k) w_kr^[0] R) above it, so weight x threshold never exceeds
    the paper's sqrt(n_k) lambda."""
    strategy = METHODS["fedgrem"](pooling_sizes="information")
    n_k = np.array([100.0, 400.0])
    w0 = np.array([[0.1, 0.3, 0.6], [1 / 3, 1 / 3, 1 / 3]])
    sizes, weights = strategy._blocks(n_k, w0)
    np.testing.assert_allclose(weights, n_k[:, None] * w0 * 3)
    threshold = 1.0 / np.sqrt(sizes)
    np.testing.assert_allclose(threshold[:, :2][[0, 1, 1], [0, 0, 1]], 1 / np.sqrt([100.0, 400, 400]))
    np.testing.assert_allclose(weights * threshold, np.minimum(np.sqrt(n_k)[:, None], weights / np.sqrt(n_k)[:, None]))
    assert METHODS["fedgrem"](pooling_sizes="client")._blocks(n_k, w0)[1] is None  # the paper's: n_k
    assert METHODS["fedgrem"]().pooling_sizes == "information"  # "auto", FedGrEM's default
    assert METHODS["d-fedgrem"]().pooling_sizes == "client"     # d-FedGrEM's


def test_zero_penalty_is_local_gradient_em():
    X, truth = make_federated_gmm(3, 100, centers=CENTERS, h=1.0, random_state=1)
    data, family = FederatedData.from_input(X), GaussianFamily()
    start = _start(truth, np.random.RandomState(1))
    a = run_rounds(METHODS["fedgrem"](penalty=0.0, center_restarts=0), family, data, start, 20, 0.0)
    b = run_rounds(METHODS["local-grem"](), family, data, start, 20, 0.0)
    np.testing.assert_allclose(a.params.theta, b.params.theta, rtol=1e-12)


def test_paper_penalty_schedule():
    lam = penalty_schedule("paper", None, p=10, K=10, n=150)
    inc = 2 * np.sqrt(10 + np.log(10))
    assert lam(1) == pytest.approx(0.1 * 1 + inc)
    assert lam(2) == pytest.approx(0.1 * (0.1 + inc) + inc)
    assert lam(1000) == pytest.approx(inc / 0.9)
    custom = penalty_schedule("paper", {"kappa": 0.5, "C": 1.0, "lambda0": 4.0}, p=3, K=2, n=10)
    assert custom(1) == pytest.approx(2.0 + np.sqrt(3 + np.log(2)))


def test_theory_penalty_schedule_and_errors():
    params = dict(kappa0=0.5, r_w=0.1, r_theta=1.0, W=0.02, E1=0.03, eta_bar=5.0)
    lam = penalty_schedule("theory", params, p=10, K=10, n=400)
    lam0 = 15 / 119 * 20 * 1.1
    inc = 15 * 20 * (0.02 + 2 * 5.0 * 0.03)
    assert lam(1) == pytest.approx(0.5 * lam0 + inc)
    assert lam(2) == pytest.approx(0.5 * (0.5 * lam0 + inc) + inc)
    with pytest.raises(ValueError, match="missing"):
        penalty_schedule("theory", {"kappa0": 0.5}, p=10, K=10, n=400)
    with pytest.raises(ValueError, match="Unknown penalty_params"):
        penalty_schedule("paper", {"kapa": 0.5}, p=10, K=10, n=400)
    with pytest.raises(ValueError, match="penalty must be"):
        penalty_schedule("huge", None, p=10, K=10, n=400)
    assert penalty_schedule(lambda t: 3.0 * t, None, 1, 1, 1)(2) == 6.0


def test_an_outlier_client_is_not_pooled_and_is_ranked_first():
    X, truth = make_federated_gmm(8, 300, centers=CENTERS, h=0.0, random_state=2)
    X[5] = 3.0 * np.random.RandomState(0).randn(300, 2) + 20.0
    gm = FederatedGaussianMixture(3, covariance_type="identity", method=FedGrEM(penalty="paper"), init="local-em",
                                  n_init=3, max_iter=500, tol=1e-6, random_state=0).fit(X)
    assert not gm.pooled_[5].any()
    assert gm.suspected_outliers_[0] == 5
    assert gm.outlier_scores_[5] > 10 * np.delete(gm.outlier_scores_, 5).max()
    assert gm.history_["penalty"][-1] == pytest.approx(2 * np.sqrt(2 + np.log(8)) / 0.9, rel=1e-6)
    assert set(gm.history_) >= {"log_likelihood", "parameter_change", "penalty", "central_iterations",
                                "pooled_fraction"}
    # The centre ignores the outlier: within the pooled estimate's noise of the truth.
    perm = np.argsort([np.argmin(np.linalg.norm(CENTERS - c, axis=1)) for c in gm.center_])
    assert np.linalg.norm(gm.center_[perm] - CENTERS, axis=1).max() < 4 * np.sqrt(2 / (7 * 300 / 3 * 0.5))


def test_personalize_recovers_an_unseen_clients_proportions():
    X, truth = make_federated_gmm(6, 300, centers=CENTERS, random_state=3)
    gm = FederatedGaussianMixture(3, covariance_type="identity", method="fedgrem", n_init=2, random_state=0).fit(X)
    rng = np.random.RandomState(1)
    w_new = np.array([0.6, 0.3, 0.1])
    labels = rng.choice(3, size=2000, p=w_new)
    X_new = CENTERS[labels] + rng.randn(2000, 2)
    order = [np.argmin(np.linalg.norm(gm.center_ - c, axis=1)) for c in CENTERS]
    w_hat = gm.personalize(X_new).weights_
    np.testing.assert_allclose(w_hat[order], w_new, atol=4 * np.sqrt(0.25 / 2000))
    assert [c.weights_.shape for c in gm.personalize([X_new, X_new[:100]])] == [(3,), (3,)]


@pytest.mark.parametrize("aggregation", ["components", "samples"])
def test_fedem_shares_components_and_keeps_local_proportions(aggregation):
    X, truth = make_federated_gmm(4, [100, 200, 150, 50], centers=CENTERS, concentration=2.0, random_state=4)
    gm = FederatedGaussianMixture(3, covariance_type="identity", method=METHODS["fedem"](aggregation=aggregation),
                                  n_init=2, max_iter=300, tol=1e-8, random_state=0).fit(X)
    np.testing.assert_array_equal(gm.means_[0], gm.means_[3])
    assert np.ptp(gm.weights_, axis=0).max() > 0.1  # proportions stay per client
    np.testing.assert_array_equal(gm.center_, gm.means_[0])
    data, family = FederatedData.from_input(X), GaussianFamily()
    _, stats = family.estep(data, gm.params_)
    if aggregation == "components":
        # The default's fixed point: the M-step of the pooled sums (FedEM's model, as pooled EM with own proportions).
        expected = stats.Sx.sum(0) / stats.N.sum(0)[:, None]
    else:
        # Marfoq et al. Alg. 1's: the n_k-weighted average of the local M-steps, which is not that (issue 59).
        n_k = data.n_samples[:, None, None]
        expected = (n_k * stats.Sx / stats.N[..., None]).sum(0) / n_k.sum()
        assert np.abs(expected - stats.Sx.sum(0) / stats.N.sum(0)[:, None]).max() > 0.01
    np.testing.assert_allclose(expected, gm.means_[0], atol=1e-4)


def test_tgmm_step_is_the_penalized_m_step():
    X, truth = make_federated_gmm(3, 100, centers=CENTERS, h=1.0, random_state=5)
    data, family = FederatedData.from_input(X), GaussianFamily()
    start = _start(truth, np.random.RandomState(5), spread=0.3)
    result = run_rounds(METHODS["tgmm"](penalty=0.4), family, data, start, 1, 0.0)
    _, stats = family.estep(data, start)
    for k in range(3):
        others = np.delete(start.theta, k, axis=0).sum(0)
        expected = (stats.Sx[k] + 0.4 * stats.N[k][:, None] * others) / (stats.N[k][:, None] * (1 + 0.4 * 2))
        np.testing.assert_allclose(result.params.theta[k], expected, rtol=1e-10)


def test_federated_regression_runs_every_method():
    rng = np.random.RandomState(6)
    coefs = np.array([[3.0, 0.0], [-3.0, 1.0]])
    X = [rng.randn(200, 2) for _ in range(4)]
    z = [rng.rand(200) < 0.5 for _ in range(4)]
    y = [np.where(zk, Xk @ coefs[0], Xk @ coefs[1]) + rng.randn(200) for Xk, zk in zip(X, z)]
    for method in ["fedgrem", "fedem", "tgmm"]:
        mr = FederatedMixtureRegression(2, method=method, fit_intercept=False, n_init=3, max_iter=300,
                                        random_state=0).fit(X, y)
        err = min(np.abs(mr.center_ - coefs).max(), np.abs(mr.center_[::-1] - coefs).max())
        assert err < 4 * np.sqrt(2 / 400), method
        assert mr.personalize(X[0], y[0]).weights_.shape == (2,)


def test_component_pooling_sizes_use_each_components_effective_size_at_the_start():
    """pooling_sizes="component": the central problem weighs component r of client k by n_k w_kr R at the
    pass's starting weights, so the pooling threshold is lambda / sqrt(n_k w_kr^[0] R): larger for small
    components."""
    X, truth = make_federated_gmm(4, 200, centers=CENTERS, concentration=3.0, random_state=7)
    gm = FederatedGaussianMixture(3, covariance_type="identity",
                                  method=experimental_fedgrem(pooling_sizes="component", center_restarts=0),
                                  weights_init=truth.weights, means_init=truth.theta, random_state=0).fit(X)
    lam = gm.history_["penalty"][-1]
    np.testing.assert_allclose(gm.pooling_threshold_, lam / np.sqrt(200 * truth.weights * 3), rtol=1e-12)
    assert np.abs(gm.weights_ - truth.weights).max() > 1e-3  # the weights moved; the sizes did not
    with pytest.raises(ValueError, match="pooling_sizes"):
        FederatedGaussianMixture(3, covariance_type="identity", method=FedGrEM(pooling_sizes="component")).fit(X)


@pytest.mark.slow  # an experiment's regression test (validation/experimental.py), 11 s: outside the default run
def test_component_pooling_sizes_do_not_collapse_a_component():
    """At the current weights a component pooled onto a centre away from its data lost weight, its threshold
    grew and pooled it harder: on the paper's MoR design at h = 2 (seed 2) client 0's fourth component
    died and every honest client's error was 8.2-9.8 (local EM's level). At the start's weights: about 3. (A
    component empty on one honest client is no sign of the defect here: at h = 2 it happens with client sizes
    too, in 4 of seeds 0-5.)"""
    X, y, truth = make_federated_mor(random_state=2, h=2.0, outlier_clients=[9])
    est = FederatedMixtureRegression(5, method=experimental_fedgrem(penalty="sure", pooling_sizes="component"),
                                     random_state=2).fit(X, y)
    _, err = estimation_errors(est.weights_, est.coef_, truth.weights, truth.theta)
    assert err[~truth.outliers].max() < 5.0


@pytest.mark.parametrize("covariance_type", ["diag", "full", "tied"])
def test_robust_variance_pooling_pools_alike_covariances_and_leaves_an_outlier(covariance_type):
    """``robust_scale``: equal covariances are pooled onto themselves; a client whose covariance is 10 times
    larger is farther than any threshold (``log 10 sqrt(d / 2)`` against ``lambda / sqrt(n)``) and keeps
    all but ``lambda / sqrt(n)`` of its log-distance."""
    from fedmm.algorithms.fedgrem import robust_scale
    family, d, K, R = GaussianFamily(covariance_type), 3, 6, 2
    rng = np.random.RandomState(0)
    A = rng.randn(R, d, d)
    cov = A @ np.swapaxes(A, 1, 2) + np.eye(d)
    if covariance_type == "tied":
        cov[:] = cov[0]
    if covariance_type == "diag":
        cov = np.diagonal(cov, axis1=1, axis2=2)[..., None, :] * np.eye(d)
    flat = lambda c: c.reshape(c.shape[:-2] + (d * d,)) if family._matrix else np.diagonal(c, axis1=-2, axis2=-1)  # noqa: E731
    scale = np.broadcast_to(flat(cov), (K, R) + flat(cov).shape[1:]).copy()
    scale[-1] *= 10.0
    n = np.full(K, 400.0)
    lam = 2.0 * np.sqrt(d + np.log(K)) / 0.9
    pooled_scale, pooled = robust_scale(family, scale, n, lam, d)
    assert pooled[:-1].all() and not pooled[-1].any()
    # The inliers share the consensus, which the outlier pulls by less than the threshold (bounded influence);
    # the outlier moves towards it by exactly the threshold, in the log-Euclidean metric.
    np.testing.assert_allclose(pooled_scale[:-1], np.broadcast_to(pooled_scale[0], pooled_scale[:-1].shape),
                               rtol=1e-10)
    v, v_new = family.log_scale(scale, d), family.log_scale(pooled_scale, d)
    assert (np.linalg.norm(v[0] - v_new[0], axis=-1) < lam / np.sqrt(400.0)).all()
    np.testing.assert_allclose(np.linalg.norm(v[-1] - v_new[-1], axis=-1), lam / np.sqrt(400.0), rtol=1e-6)


def test_robust_variance_pooling_in_a_fit():
    """Different means (h = 3), the same covariances: "robust" pools the covariances the means leave apart."""
    X, truth = make_federated_gmm(5, 300, centers=3 * CENTERS, h=3.0, random_state=1)
    fits = {pool: FederatedGaussianMixture(3, covariance_type="full", method=FedGrEM(pool_variances=pool),
                                           random_state=0).fit(X)
            for pool in (True, "robust")}
    assert fits["robust"].pooled_variances_.mean() > 0.8 > fits[True].pooled_variances_.mean()
    np.testing.assert_array_equal(fits[True].pooled_variances_, fits[True].pooled_)
    # The pooled covariances are the truth's identity within sampling error (n = 5 x 300 / 3 per component).
    pooled = fits["robust"].covariances_[fits["robust"].pooled_variances_]
    assert np.abs(pooled - np.eye(2)).max() < 5 * np.sqrt(2 / 500)
    with pytest.raises(ValueError, match="pool_variances"):
        FederatedGaussianMixture(3, method=FedGrEM(pool_variances="always")).fit(X)


@pytest.mark.parametrize("precondition", [True, False])
def test_fully_pooled_regression_meets_at_the_pooled_least_squares_fit(precondition):
    """One component, penalty inf: every client is pooled, and the fixed point must be pooled least
    squares on all clients' rows. With preconditioned steps the clients send their own least-squares
    fits, which the central update weighs by their information A_k (the design-moment metric); the
    plain mean of the fits, what a Euclidean central problem gives, differs on clients of different
    designs and sizes."""
    rng = np.random.RandomState(3)
    X = [rng.randn(n, 3) * rng.uniform(0.3, 3.0, 3) + rng.randn(3) for n in (15, 40, 90, 25)]
    y = [x @ np.array([1.0, -2.0, 0.5]) + 4.0 + rng.randn(len(x)) for x in X]
    est = FederatedMixtureRegression(1, method=FedGrEM(penalty=np.inf), precondition=precondition,
                                     max_iter=3000, tol=1e-10, random_state=0).fit(X, y)
    design = np.column_stack([np.ones(sum(map(len, X))), np.vstack(X)])
    ols = np.linalg.lstsq(design, np.concatenate(y), rcond=None)[0]
    np.testing.assert_allclose(est.intercept_[0, 0], ols[0], rtol=1e-6)
    np.testing.assert_allclose(est.coef_[0, 0], ols[1:], rtol=1e-6)


def test_variances_shrink_as_far_as_the_means():
    """Pooled components (share 1) take the pooled M-step's variance, share 0 keeps a client's own, a
    client crossing the threshold changes nothing abruptly (its own variance nor the pooled one), one
    at share 3/4 enters the pooled variance with half its weight, and a client beyond twice the
    threshold (share 1/2) with a huge variance leaves the pooled one alone."""
    from fedmm.algorithms.fedgrem import pool_variances

    rng = np.random.RandomState(0)
    scale, N = rng.uniform(0.5, 2.0, (6, 3, 2)), rng.uniform(10, 100, (6, 3))
    everyone = pool_variances(scale, N, np.ones((6, 3)))
    np.testing.assert_allclose(everyone, np.broadcast_to((N[..., None] * scale).sum(0) / N.sum(0)[:, None],
                                                         scale.shape))
    np.testing.assert_array_equal(pool_variances(scale, N, np.zeros((6, 3))), scale)
    share = np.ones((6, 3))
    share[0, 1] = 1.0 - 1e-9  # client 0's component 1 just outside the threshold
    np.testing.assert_allclose(pool_variances(scale, N, share), everyone, rtol=1e-8)
    share[0, 1] = 0.75
    half = np.concatenate([[N[0, 1] / 2], N[1:, 1]])
    np.testing.assert_allclose(pool_variances(scale, N, share)[1:, 1],
                               np.broadcast_to((half[:, None] * scale[:, 1]).sum(0) / half.sum(), (5, 2)))
    others = (N[1:, 1, None] * scale[1:, 1]).sum(0) / N[1:, 1].sum()
    share[0, 1], scale[0, 1] = 0.5, 1e6
    np.testing.assert_allclose(pool_variances(scale, N, share)[1:, 1], np.broadcast_to(others, (5, 2)), rtol=1e-12)


def test_an_empty_component_counts_in_the_noise_units_at_its_clients_typical_variance():
    """A component a client holds no rows of has no variance estimate (its M-step gives the squared mean): it
    counts at the client's median over the components it holds, so where it sits cannot move the units; components
    with rows, and clients without empty ones, count as they are."""
    from fedmm.algorithms.variances import EMPTY_ROWS, empty_components, held_variances, noise_scale

    rng = np.random.RandomState(0)
    scale, N = rng.uniform(0.5, 2.0, (3, 4, 2)), rng.uniform(10, 100, (3, 4))
    N[1, 3] = N[2, 3] = 0.0
    N[2, 0] = EMPTY_ROWS / 2
    empty = empty_components(np.full(3, 100.0), N / 100.0)
    np.testing.assert_array_equal(np.flatnonzero(empty), [7, 8, 11])
    held = held_variances(scale, empty)
    np.testing.assert_array_equal(held[0], scale[0])
    np.testing.assert_array_equal(held[1, :3], scale[1, :3])
    np.testing.assert_array_equal(held[1, 3], np.median(scale[1, :3], axis=0))
    np.testing.assert_array_equal(held[2, [0, 3]], np.broadcast_to(np.median(scale[2, 1:3], axis=0), (2, 2)))
    moved = scale.copy()
    moved[[1, 2], 3] = rng.uniform(1e-4, 1e-2, (2, 2))   # where the empty means sat, squared
    np.testing.assert_array_equal(noise_scale(moved, empty), noise_scale(scale, empty))
    assert not np.array_equal(noise_scale(moved), noise_scale(scale))   # fails without the empty components


def test_a_component_a_client_holds_no_rows_of_sits_on_the_centre():
    """Two honest clients, each holding two of three components, and a party whose 200 rows lie on a ray from one
    component's mean, out to 100 (it stretches the standard units): the component it holds alone is empty on both
    honest clients. An empty component carries no information; it sits on the centre, pooled. Before, one such
    component stayed off it, crept towards it by a threshold a round, and the fit ran to ``max_iter``."""
    mu = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    rng = np.random.RandomState(5)
    honest = [mu[rng.choice(held, n)] + rng.randn(n, 2) for held, n in (([0, 1], 200), ([1, 2], 250))]
    ray = -rng.uniform(0, 100, (200, 1)) * np.array([[1.0, 1.0]]) / np.sqrt(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = FederatedGaussianMixture(3, max_iter=300, random_state=5).fit(honest + [ray])
    empty = est.weights_ * np.array([200, 250, 200])[:, None] < 1e-8
    assert empty.any() and est.pooled_[empty].all()
    np.testing.assert_allclose(est.means_[empty], np.broadcast_to(est.center_, est.means_.shape)[empty])
    assert est.converged_


def test_rounds_settle_where_two_clients_of_three_hold_a_component_on_no_rows():
    """``make_federated_gmm``'s outlier client at a third of the federation: two clients of three hold a component
    on no rows. Their variances, the squared means the server last sent, set the noise units of that component, and
    sparse FedGrEM's rounds alternated between two pooled sets until ``max_iter`` (511 queries, the fit 4 rounds)."""
    X, _ = make_federated_gmm(n_clients=3, n_samples=120, outlier_clients=[2], random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = FederatedGaussianMixture(5, method="sparse-fedgrem", max_iter=200, random_state=0).fit(X)
    assert est.converged_
    assert len(est.communication_["query"]) < 200


def test_pooled_variances_let_thousands_of_small_clients_converge():
    """With 3,000 clients of 50 samples one client sits at the threshold; when a pooled component took the
    pooled variance and an unpooled one its own, it flipped between the two every round and the run met
    max_iter (500) without converging. Now the variance follows the means' share: it converges (72 rounds)."""
    rng = np.random.RandomState(0)
    centres = 3.0 * rng.standard_normal((5, 10))
    labels = rng.randint(5, size=(3000, 50))
    X = list(centres[labels] + rng.standard_normal((3000, 50, 10)))
    fit = FederatedGaussianMixture(5, method=FedGrEM(center_restarts=0), init="local-em", random_state=0).fit(X)
    assert fit.converged_ and fit.n_iter_ < 200
    # One population: no group of its own for the clients local EM left in another labelling or a poor optimum
    # (docs/research/groups.md: 21 groups, or 80 clients held for 500 rounds, before the rule that refuses them).
    assert (fit.groups_ == 0).all()


def test_sure_runs_are_charged_at_the_schedules_penalty():
    """Under penalty="sure" a run's diagnostics carry lambda_schedule / lambda_chosen as a float (the
    clients' sizes are integers: the ratio was once truncated to 0, charging runs nothing), and with the
    schedule itself the ratio is 1."""
    X, truth = make_federated_gmm(4, 100, centers=CENTERS, h=0.0, random_state=0)
    data, family = FederatedData.from_input(X), GaussianFamily()
    start = _start(truth, np.random.RandomState(0))
    sure = run_rounds(METHODS["fedgrem"](penalty="sure", center_restarts=0), family, data, start, 5, 0.0)
    chosen, scheduled = sure.history["penalty"][-1], penalty_schedule("paper", None, 2, 4, 100)(5)
    assert chosen != scheduled
    np.testing.assert_allclose(sure.diagnostics.objective_scale, scheduled / chosen, rtol=1e-12)
    paper = run_rounds(METHODS["fedgrem"](penalty="paper", center_restarts=0), family, data, start, 5, 0.0)
    assert np.all(paper.diagnostics.objective_scale == 1.0)


@pytest.mark.parametrize("h", [0.0, 3.0])
def test_floored_sure_never_pools_less_than_the_schedule(h):
    """penalty="sure-floored" takes SURE's lambda when it is above the schedule's (alike clients: the same run
    as "sure") and the schedule's otherwise (clients far apart, where SURE would pool less)."""
    X, truth = make_federated_gmm(4, 100, centers=CENTERS, h=h, random_state=0)
    data, family = FederatedData.from_input(X), GaussianFamily()
    start = _start(truth, np.random.RandomState(0))
    runs = {penalty: run_rounds(METHODS["fedgrem"](penalty=penalty, center_restarts=0), family, data, start,
                                5, 0.0) for penalty in ("sure", "sure-floored")}
    scheduled = np.array([penalty_schedule("paper", None, 2, 4, 100)(t) for t in range(1, 6)])
    sure, floored = runs["sure"].history["penalty"], runs["sure-floored"].history["penalty"]
    assert np.all(floored >= scheduled)
    if h == 0.0:
        assert np.all(sure > scheduled)
        np.testing.assert_array_equal(floored, sure)
    else:
        assert np.all(sure[1:] < scheduled[1:])
        np.testing.assert_array_equal(floored[1:], scheduled[1:])


def test_a_penalty_that_alternates_settles_at_the_larger_value():
    """SURE's choices going A, B, A, B set a floor at the larger of the two; a single return (A, B, A) and
    choices above the floor pass untouched, and a new cycle raises the floor."""
    memory = (np.nan, np.nan, 0.0)
    lams = []
    for chosen in (20.0, 31.6, 20.0, 31.6, 20.0, 31.6, 20.0, 50.0, 20.0, 50.0, 31.6):
        pilot = lams[-1] if lams else 8.8
        lam, memory = settle_penalty(chosen, pilot, memory)
        lams.append(lam)
    assert lams == [20.0, 31.6, 20.0, 31.6, 31.6, 31.6, 31.6, 50.0, 31.6, 50.0, 50.0]
    assert settle_penalty(5.0, 7.0, (9.0, 5.0, 0.0)) == (5.0, (5.0, 7.0, 0.0))   # A, B, A: SURE's choice stands


@pytest.mark.parametrize("penalty", ["sure", "sure-floored"])
def test_sure_settles_with_many_clients(penalty):
    """300 clients of the paper's design, a tenth outliers: SURE's choice alternated between two grid values
    every round and the fit met max_iter (500); it now settles and converges."""
    X, _ = make_federated_gmm(300, 50, outlier_clients=range(30), random_state=0)
    # One centre: the 30 outliers draw from one distribution and, with centres chosen, form a group of their own,
    # whose five components on one Gaussian blob converge slowly (320 rounds), which this test is not about.
    fit = FederatedGaussianMixture(5, method=FedGrEM(penalty=penalty, n_centers=1), init="trimmed-pooled",
                                   random_state=0).fit(X)
    assert fit.converged_ and fit.n_iter_ < 100
    assert len(np.unique(fit.history_["penalty"][-10:])) == 1


def test_centre_pull_fades_out_clients_the_centre_does_not_explain():
    """fedmm.algorithms.fedgrem.centre_pull: full pull while a client's score is at most 1, none from 2,
    linear between; everyone pulls when a third of the clients or more would lose weight."""
    from scipy.stats import chi2
    from fedmm.algorithms.fedgrem import centre_pull, outlier_scores
    rng = np.random.RandomState(0)
    K, R, p = 30, 3, 4
    N = np.full((K, R), 40.0)
    distance = np.sqrt(chi2.rvs(p, size=(K, R), random_state=rng) / N)
    distance[0] *= 10.0                                                    # far: no pull
    scores = outlier_scores(distance, N, p)
    pull = centre_pull(distance, N, p)
    np.testing.assert_allclose(pull, np.clip(2.0 - scores, 0.0, 1.0))
    assert pull[0] == 0.0 and (pull[scores <= 1.0] == 1.0).all()
    distance[:10] *= 10.0                                                  # a third: their spread, not outliers
    np.testing.assert_array_equal(centre_pull(distance, N, p), np.ones(K))


def _overlapping_components_fits(seed):
    """FedGrEM with and without the reweighting on three overlapping components (make_grouped_gmm(n_groups=1,
    spread=0.5): centres about one sd apart) and an outlier client: {reweighting: (honest clients' mean
    error, their proportions summed)}."""
    from fedmm.simulate import make_grouped_gmm
    X, truth, groups = make_grouped_gmm(n_groups=1, spread=0.5, random_state=seed)
    out = {}
    for reweighting in (True, False):
        fit = FederatedGaussianMixture(3, covariance_type="spherical", random_state=seed,
                                       method=FedGrEM(reweighting=reweighting)).fit(X)
        error = estimation_errors(fit.weights_, fit.means_, truth.weights, truth.theta)[1][groups >= 0].mean()
        out[reweighting] = error, fit.weights_[groups >= 0].sum(axis=0)
    return out


def test_an_outlier_does_not_win_a_component_the_honest_clients_hold_weakly():
    """In the paper's central problem the outlier's bounded pull wins the component the honest clients hold
    least, and it ends empty on every honest client (seed 0: their proportions of it sum to 6e-24, error 4.39
    against local EM's 1.70); with the reweighting the outlier pulls on nothing and the honest clients keep
    it (0.16 in all, error 1.73)."""
    fits = _overlapping_components_fits(0)
    assert fits[False][1].min() < 1e-6 and fits[True][1].min() > 0.1
    assert fits[True][0] < 0.5 * fits[False][0]


@pytest.mark.slow
def test_the_reweighting_halves_the_error_where_components_overlap():
    """Seeds 0-5 of the design above: median error 2.50 with the reweighting, 4.40 without (where the start
    already has an empty component, nothing revives it: seeds 1 and 3)."""
    errors = np.array([[fits[r][0] for r in (True, False)] for fits in map(_overlapping_components_fits, range(6))])
    assert np.median(errors[:, 0]) < 0.75 * np.median(errors[:, 1])


@pytest.mark.filterwarnings("ignore:method=.* did not converge")
def test_more_centres_than_the_clients_can_form_draw_a_warning():
    """n_centers is a most: a centre holds three clients or more, so 4 clients form one, and n_centers=100 says so
    (before: accepted without a word)."""
    X, _ = make_federated_gmm(4, 40, random_state=0)
    with pytest.warns(UserWarning, match=r"n_centers=100\): 4 clients form at most 1 centre.*n_centers to 1 or less"):
        FederatedGaussianMixture(5, method=FedGrEM(n_centers=100), init="local-em", max_iter=2, random_state=0).fit(X)


# --- a new client (personalize) -------------------------------------------------------------------------------

def _new_client_errors(seed, n_new, h=0.5):
    """A new client's mean error (components matched) from ``personalize``, from its own EM, and at the consensus,
    after FedGrEM on ten clients of 150 rows at distance ``h``."""
    from scipy.optimize import linear_sum_assignment
    from sklearn.mixture import GaussianMixture
    from fedmm import FederatedGaussianMixture

    def error(means, truth):
        D = np.linalg.norm(means[:, None] - truth[None], axis=-1)
        return D[linear_sum_assignment(D)].mean()

    X, truth = make_federated_gmm(11, [150] * 10 + [n_new], h=h, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = FederatedGaussianMixture(5, random_state=seed).fit(X[:10])
        own = GaussianMixture(5, covariance_type="diag", n_init=10, random_state=seed).fit(X[10]).means_
    new = model.personalize(X[10]).params_.theta[0]
    return error(new, truth.theta[10]), error(own, truth.theta[10]), error(model.center_, truth.theta[10])


def test_a_new_client_with_many_rows_is_near_its_own_em_and_with_few_keeps_the_consensus():
    """Issue 61's targets: 300 rows within 1.1x the new client's own EM (measured 0.84x over five seeds, against
    1.35x with the components at the consensus); 30 rows at least as good as the consensus (mean paired difference
    +0.001 over six seeds, sd 0.03: not worse than two standard errors of a two-seed mean, 0.042), where its own
    EM is five times worse. Two seeds: the ratios' spread over seeds is about 0.1."""
    many = np.array([_new_client_errors(seed, 300) for seed in range(2)]).mean(axis=0)
    few = np.array([_new_client_errors(seed, 30) for seed in range(2)]).mean(axis=0)
    assert many[0] <= 1.1 * many[1] and many[0] < many[2]
    assert few[0] <= few[2] + 2 * 0.03 / np.sqrt(2) and few[0] < few[1]


def test_a_new_clients_shrinkage_spans_the_consensus_and_its_own_em():
    """``lambda = inf`` keeps the consensus components; ``lambda = 0`` is the client's own EM from the consensus."""
    from fedmm.algorithms.fedgrem import shrunk_client
    from fedmm.algorithms._base import em_update
    X, truth = make_federated_gmm(1, 400, h=1.0, random_state=3)
    family, data = GaussianFamily("diag"), FederatedData.from_input(X)
    consensus = MixtureParams(np.full((1, 5), 0.2), truth.theta[:1] + 0.5, np.ones((1, 5, 10)))
    kept = shrunk_client(family, data, consensus, np.inf)
    np.testing.assert_array_equal(kept.theta, consensus.theta)
    alone = shrunk_client(family, data, consensus, 0.0, max_iter=1000, tol=1e-10)
    stats = family.estep(data, alone)[1]
    np.testing.assert_allclose(alone.theta, em_update(family, stats, data.n_samples).theta, atol=1e-8)


def test_restart_passes_share_max_iter_rounds():
    """The first pass, the centre restart and its settling pass share ``max_iter`` rounds, so ``n_iter_`` never
    exceeds it (scikit-learn's contract); before, each pass had ``max_iter``, and this fit reported 28 of 12."""
    X, _ = make_federated_gmm(n_clients=6, n_samples=80, outlier_clients=[5], random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # it does not converge in 12 rounds
        est = FederatedGaussianMixture(4, method="fedgrem", max_iter=12, random_state=0).fit(X)
    assert est.n_iter_ <= 12 and len(est.history_["log_likelihood"]) == est.n_iter_


@settings(max_examples=60, deadline=None)
@given(st.floats(0.01, 5.0), st.lists(st.floats(-10, 10), min_size=3, max_size=3))
def test_a_new_clients_mcp_threshold_keeps_far_components_and_pools_near_ones(tau, u):
    """The group MCP threshold (gamma = 3): 0 within tau, the vector itself beyond 3 tau, 3 / 2 of the soft
    threshold between (and so continuous)."""
    from fedmm.algorithms.central import soft_threshold
    from fedmm.algorithms.new_client import group_mcp_threshold
    u, tau_ = np.array(u)[None, None], np.array([[tau]])
    mcp, r = group_mcp_threshold(u, tau_), np.linalg.norm(u)
    if r <= tau:
        np.testing.assert_array_equal(mcp, 0.0)
    elif r >= 3 * tau:
        np.testing.assert_allclose(mcp, u, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(mcp, 1.5 * soft_threshold(u, tau_), rtol=1e-12, atol=1e-12)


def test_an_honest_clients_variance_deviation_is_not_set_by_the_others_empty_components():
    """Two clients of three hold a component on no rows: their variances there are only the squared means the server
    last sent (``update_scale``). Counted in the median the variance scores measure from, they set it, and the client
    that held rows of the component deviated from it by ``log(1 / mu^2) / sqrt(2)`` (d-FedGrEM on
    ``make_federated_gmm(4, 120, outlier_clients=[3], random_state=10)`` scored an honest client 4.14; 1.00 now).
    An empty component counts at its client's median over the components it holds rows of."""
    from fedmm.algorithms.outliers import scale_deviation
    from fedmm.families import GaussianFamily
    rng = np.random.RandomState(0)
    scale = rng.uniform(0.5, 2.0, (3, 4, 2))
    empty = np.zeros((3, 4), dtype=bool)
    empty[1:, 3] = True
    scale[1:, 3] = rng.uniform(1e-4, 1e-2, (2, 2))           # where the empty means sat, squared
    family, everyone = GaussianFamily("diag"), np.ones(3, dtype=bool)
    deviation = scale_deviation(family, scale, 2, everyone, empty)
    assert np.abs(deviation[0, 3]).max() < np.log(4.0) / np.sqrt(2.0)   # within the held variances' range
    assert np.abs(scale_deviation(family, scale, 2, everyone)[0, 3]).min() > 2.0    # the squared means' median
    moved = scale.copy()
    moved[1:, 3] = rng.uniform(1e-4, 1e-2, (2, 2))
    np.testing.assert_array_equal(scale_deviation(family, moved, 2, everyone, empty)[0], deviation[0])
