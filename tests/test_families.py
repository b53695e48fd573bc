import numpy as np
import pytest

from fedmm.data import FederatedData
from fedmm.families import GaussianFamily, MixtureParams, RegressionFamily
from fedmm.kernels.gaussian import _gaussian_log_prob
from fedmm.kernels.regression import _regression_log_prob


def _gaussian_setup(rng, covariance_type, K=2, R=3, d=4):
    family = GaussianFamily(covariance_type)
    data = FederatedData.from_input([rng.randn(40, d) + k for k in range(K)])
    if covariance_type in ("full", "tied"):
        scale = _random_covariances(rng, (K, 1 if covariance_type == "tied" else R), d)
        scale = np.broadcast_to(scale, (K, R, d * d)).copy()
    else:
        s = d if covariance_type == "diag" else 1
        scale = np.ones((K, R, 1)) if covariance_type == "identity" else rng.uniform(0.5, 2.0, (K, R, s))
    params = MixtureParams(rng.dirichlet(np.ones(R), size=K), rng.randn(K, R, d), scale)
    return family, data, params


def _random_covariances(rng, shape, d):
    """Positive definite ``A A^T / d + I / 2`` matrices, flattened to ``shape + (d * d,)``."""
    A = rng.randn(*shape, d, d)
    return (A @ np.swapaxes(A, -1, -2) / d + 0.5 * np.eye(d)).reshape(shape + (d * d,))


def _regression_setup(rng, noise_variance, fit_intercept, K=2, R=3, d=3, precondition=True):
    family = RegressionFamily(fit_intercept, noise_variance, precondition=precondition)
    X = [rng.randn(40, d) for _ in range(K)]
    y = [rng.randn(40) for _ in range(K)]
    data = FederatedData.from_input(X, y)
    data = data.with_X(family.design(data.X))
    p = family.param_dim(d)
    scale = rng.uniform(0.5, 2.0, (K, R, 1))
    params = MixtureParams(rng.dirichlet(np.ones(R), size=K), rng.randn(K, R, p), scale)
    return family, data, params


def _q_hat(log_prob, resp, n):
    """Q-hat(theta | w', theta') = (1/n) sum_i sum_r g_ir log p_r(x_i; theta_r) (FedGrEM Sec. 2.3)."""
    return (resp * log_prob).sum() / n


def _numeric_gradient(f, theta, h=1e-6):
    grad = np.zeros_like(theta)
    for idx in np.ndindex(theta.shape):
        up, down = theta.copy(), theta.copy()
        up[idx] += h
        down[idx] -= h
        grad[idx] = (f(up) - f(down)) / (2 * h)
    return grad


@pytest.mark.parametrize("covariance_type", ["identity", "spherical", "diag", "tied", "full"])
def test_gaussian_gradient_step_follows_the_gradient_of_q_hat(rng, covariance_type):
    family, data, params = _gaussian_setup(rng, covariance_type)
    _, log_resp = family.log_resp(data, params)
    resp = np.exp(log_resp)
    _, stats = family.estep(data, params)
    n_k = data.n_samples
    eta = np.ones(params.weights.shape)
    step = family.gradient_step(stats, params, eta, n_k) - params.theta  # = Sigma_r d Q-hat / d theta_r
    if covariance_type in ("full", "tied"):
        K, R, d = params.theta.shape
        step = np.linalg.solve(params.scale.reshape(K, R, d, d), step[..., None])[..., 0]
    else:
        step = step / params.scale
    for k in range(data.n_clients):
        Xk, _ = data.client(k)
        rk = resp[data.offsets[k]:data.offsets[k + 1]]
        grad = _numeric_gradient(lambda th: _q_hat(_gaussian_log_prob(Xk, th, params.scale[k]), rk, n_k[k]),
                                 params.theta[k])
        np.testing.assert_allclose(step[k], grad, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_regression_gradient_step_follows_the_gradient_of_q_hat(rng, fit_intercept):
    family, data, params = _regression_setup(rng, 1.0, fit_intercept, precondition=False)
    params = params._replace(scale=np.ones_like(params.scale))  # the paper's unit noise: step = gradient
    resp = np.exp(family.log_resp(data, params)[1])
    _, stats = family.estep(data, params)
    n_k = data.n_samples
    step = family.gradient_step(stats, params, np.ones(params.weights.shape), n_k) - params.theta
    for k in range(data.n_clients):
        Xk, yk = data.client(k)
        rk = resp[data.offsets[k]:data.offsets[k + 1]]
        grad = _numeric_gradient(lambda th: _q_hat(_regression_log_prob(Xk, yk, th, params.scale[k]), rk, n_k[k]),
                                 params.theta[k])
        np.testing.assert_allclose(step[k], grad, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_preconditioned_regression_step_moves_towards_the_m_step_and_is_equivariant(rng, fit_intercept):
    """With ``eta = C / w_hat`` the preconditioned step is ``theta + C (M-step - theta)``: a contraction for
    ``0 < C < 2``, whatever the features' scale; and mapping the features by ``B`` maps the step by ``B^-1``."""
    family, data, params = _regression_setup(rng, "component", fit_intercept)
    _, stats = family.estep(data, params)
    n_k = data.n_samples
    C = 1.3
    eta = C / (stats.N / n_k[:, None])
    step = family.gradient_step(stats, params, eta, n_k)
    m_step, _ = family.m_step(stats)
    # Both solves carry the ridge reg_coef * (trace(A) / p + 1) = O(1e-7) here, which is all that differs.
    np.testing.assert_allclose(step, params.theta + C * (m_step - params.theta), rtol=1e-5, atol=1e-7)
    p = params.theta.shape[-1]
    B = rng.randn(p, p) + 3 * np.eye(p)
    mapped = data.with_X(data.X @ B)
    theta_b = np.linalg.solve(B, params.theta[..., None])[..., 0]
    _, stats_b = family.estep(mapped, params._replace(theta=theta_b))
    step_b = family.gradient_step(stats_b, params._replace(theta=theta_b), eta, n_k)
    np.testing.assert_allclose(step_b, np.linalg.solve(B, step[..., None])[..., 0], rtol=1e-5, atol=1e-7)


def _weighted_spread(family, data, params, means, covariance_type):
    """The variances about ``means`` (K, R, d) from the samples themselves: ``sum_i g_ir (x_i - mu_r)
    (x_i - mu_r)^T / N_r`` reduced to the covariance type, plus ``reg_covar`` (K, R, s)."""
    resp = np.exp(family.log_resp(data, params)[1])
    out = []
    for k in range(data.n_clients):
        Xk, _ = data.client(k)
        rk, d, R = resp[data.offsets[k]:data.offsets[k + 1]], Xk.shape[1], means.shape[1]
        scatter = [np.einsum("i,ij,il->jl", rk[:, r], Xk - means[k, r], Xk - means[k, r]) for r in range(R)]
        reg = family.reg_covar * np.eye(d)
        full = [scatter[r] / rk[:, r].sum() + reg for r in range(R)]
        out.append([{"identity": [1.0], "spherical": [np.diag(f).mean()], "diag": np.diag(f), "full": f.ravel(),
                     "tied": (sum(scatter) / len(Xk) + reg).ravel()}[covariance_type] for f in full])
    return np.array(out)


@pytest.mark.parametrize("covariance_type", ["identity", "spherical", "diag", "tied", "full"])
def test_gaussian_m_step_is_a_stationary_point_and_variances_are_the_weighted_spread(rng, covariance_type):
    family, data, params = _gaussian_setup(rng, covariance_type)
    _, stats = family.estep(data, params)
    means, var = family.m_step(stats)
    moved = family.gradient_step(stats, params._replace(theta=means), np.ones(params.weights.shape),
                                 data.n_samples)
    np.testing.assert_allclose(moved, means, atol=1e-12)
    np.testing.assert_allclose(var, _weighted_spread(family, data, params, means, covariance_type), rtol=1e-9)


@pytest.mark.parametrize("covariance_type", ["spherical", "diag", "tied", "full"])
def test_gaussian_variances_at_any_means_are_the_weighted_spread_about_them(rng, covariance_type):
    """``update_scale`` at means that are not the M-step's (FedGrEM's server evaluates it at the pooled
    ``nu``): ``sum_i g_ir (x_i - mu_r)^2 / N_r`` about the given ``mu_r``, from the sums alone. (At the
    M-step's means a variance about ``Sx / N`` whatever ``mu`` is given would pass.)"""
    family, data, params = _gaussian_setup(rng, covariance_type)
    _, stats = family.estep(data, params)
    mu = rng.randn(*params.theta.shape)
    np.testing.assert_allclose(family.update_scale(stats, mu),
                               _weighted_spread(family, data, params, mu, covariance_type), rtol=1e-9)


def test_gradient_step_with_eta_one_over_w_is_the_m_step(rng):
    """With eta = 1 / w_hat (C_eta = 1 at the current weights) gradient EM is EM (App. E.2)."""
    family, data, params = _gaussian_setup(rng, "identity")
    _, stats = family.estep(data, params)
    eta = data.n_samples[:, None] / stats.N
    np.testing.assert_allclose(family.gradient_step(stats, params, eta, data.n_samples),
                               family.m_step(stats)[0], rtol=1e-10)


@pytest.mark.parametrize("noise_variance", [1.0, 2.5, "shared", "component"])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_regression_m_step_is_weighted_least_squares(rng, noise_variance, fit_intercept):
    family, data, params = _regression_setup(rng, noise_variance, fit_intercept)
    _, stats = family.estep(data, params)
    coef, var = family.m_step(stats)
    resp = np.exp(family.log_resp(data, params)[1])
    for k in range(data.n_clients):
        Xk, yk = data.client(k)
        rk = resp[data.offsets[k]:data.offsets[k + 1]]
        rss = []
        for r in range(3):
            sw = np.sqrt(rk[:, r])
            expected = np.linalg.lstsq(Xk * sw[:, None], yk * sw, rcond=None)[0]
            np.testing.assert_allclose(coef[k, r], expected, rtol=1e-6, atol=1e-8)
            rss.append((rk[:, r] * (yk - Xk @ coef[k, r]) ** 2).sum())
        expected_var = {"shared": np.full(3, sum(rss) / len(yk)),
                        "component": np.array(rss) / rk.sum(0)}.get(noise_variance, np.full(3, noise_variance))
        np.testing.assert_allclose(var[k, :, 0], expected_var, rtol=1e-6)


def test_parameter_counts():
    assert GaussianFamily("identity").n_parameters(3, 4) == 3 * 4 + 2
    assert GaussianFamily("spherical").n_parameters(3, 4) == 3 * 4 + 3 + 2
    assert GaussianFamily("diag").n_parameters(3, 4) == 3 * 4 + 3 * 4 + 2
    assert GaussianFamily("tied").n_parameters(3, 4) == 3 * 4 + 10 + 2  # scikit-learn's counts
    assert GaussianFamily("full").n_parameters(3, 4) == 3 * 4 + 3 * 10 + 2
    assert RegressionFamily(True, 1.0).n_parameters(3, 4) == 3 * 5 + 2
    assert RegressionFamily(False, "shared").n_parameters(3, 4) == 3 * 4 + 1 + 2
    assert RegressionFamily(False, "component").n_parameters(3, 4) == 3 * 4 + 3 + 2


@pytest.mark.parametrize("covariance_type", ["full", "tied"])
def test_full_covariance_samples_and_consensus(rng, covariance_type):
    family = GaussianFamily(covariance_type)
    cov = _random_covariances(rng, (2,), 3)
    theta = rng.randn(2, 3)
    labels = np.repeat([0, 1], 20000)
    X = family.sample(theta, cov, labels, rng)
    for r in range(2):
        # Sample covariance entries have sd sqrt((S_jj S_ll + S_jl^2) / n) <= 0.02 here: 5 sd.
        np.testing.assert_allclose(np.cov(X[labels == r].T), cov[r].reshape(3, 3), atol=0.1)
    P = family.precisions_cholesky(cov[None])[0]  # full: (R, d, d); tied: the first component's (d, d)
    P = P[0] if covariance_type == "full" else P
    np.testing.assert_allclose(P @ P.T, np.linalg.inv(cov[0].reshape(3, 3)), rtol=1e-9)
    np.testing.assert_allclose(np.tril(P, -1), 0.0)
    # The consensus of identical clients is their covariance; of different ones, positive definite.
    np.testing.assert_allclose(family.center_scale(np.stack([cov] * 3)), cov, rtol=1e-12)
    center = family.center_scale(_random_covariances(rng, (5, 2), 3)).reshape(2, 3, 3)
    assert (np.linalg.eigvalsh(center) > 0).all()


def test_bad_family_options():
    with pytest.raises(ValueError, match="covariance_type"):
        GaussianFamily("unstructured")
    with pytest.raises(ValueError, match="noise_variance"):
        RegressionFamily(True, -1.0)
    with pytest.raises(ValueError, match="noise_variance"):
        RegressionFamily(True, "free")


@pytest.mark.parametrize("covariance_type", ["spherical", "diag", "tied", "full"])
def test_params_to_internal_inverts_to_original(covariance_type):
    """A warm start maps the last fit back into standard units: exactly the inverse of to_original."""
    from fedmm.simulate import make_federated_gmm, make_federated_mor
    from fedmm.units import pooled_moments
    rng = np.random.RandomState(0)
    X, _ = make_federated_gmm(2, 50, random_state=0)
    X = [3.0 * x @ rng.randn(10, 10) + 5.0 for x in X]
    family = GaussianFamily(covariance_type)
    units = family.units(pooled_moments(FederatedData.from_input(X)))
    s = {"spherical": 1, "diag": 10, "tied": 100, "full": 100}[covariance_type]
    A = rng.randn(2, 3, 10, 10)
    scale = (A @ np.swapaxes(A, -1, -2) + np.eye(10)).reshape(2, 3, 100)[..., :s] if s == 100 else \
        rng.uniform(0.5, 2.0, (2, 3, s))
    params = MixtureParams(np.full((2, 3), 1 / 3), rng.randn(2, 3, 10), scale)
    for a, b in zip(family.params_to_internal(family.to_original(params, units), units), params):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    Xr, yr, _ = make_federated_mor(2, 50, random_state=0)
    reg = RegressionFamily(True, "component")
    units = reg.units(pooled_moments(FederatedData.from_input(Xr, yr)))
    params = MixtureParams(np.full((2, 3), 1 / 3), rng.randn(2, 3, 11), rng.uniform(0.5, 2.0, (2, 3, 1)))
    for a, b in zip(reg.params_to_internal(reg.to_original(params, units), units), params):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("covariance_type", ["identity", "spherical", "diag", "tied", "full"])
def test_gaussian_loglik_is_the_e_steps_to_the_last_bit(rng, covariance_type, backend):
    """The log-likelihood queries leave the squared sums out (issue 60): the same numbers as the E-step's."""
    _, data, params = _gaussian_setup(rng, covariance_type)
    family = GaussianFamily(covariance_type, backend=backend)
    assert np.array_equal(family.loglik(data, params), family.estep(data, params)[0])


def test_regression_loglik_is_the_e_steps(rng):
    family, data, params = _regression_setup(rng, "component", True)
    assert np.array_equal(family.loglik(data, params), family.estep(data, params)[0])
