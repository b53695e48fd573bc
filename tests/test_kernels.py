import numpy as np
from hypothesis import given, strategies as st
from scipy import stats

from fedmm.data import FederatedData
from fedmm.kernels import get_kernels

kernels = get_kernels("numpy")


def _random_problem(rng, K=3, R=4, d=3, s=None):
    s = d if s is None else s
    data = FederatedData.from_input([rng.randn(n, d) for n in rng.randint(2, 30, size=K)],
                                    [rng.randn(n) for n in [0] * 0] or None)
    weights = rng.dirichlet(np.ones(R), size=K)
    theta = rng.randn(K, R, d)
    scale = rng.uniform(0.5, 2.0, size=(K, R, s))
    return data, weights, theta, scale


def test_gaussian_log_density_matches_scipy(rng):
    data, weights, means, var = _random_problem(rng)
    log_norm, log_resp = kernels.gaussian_log_resp(data.X, data.offsets, weights, means, var)
    for k in range(data.n_clients):
        Xk = data.client(k)[0]
        dens = np.column_stack([weights[k, r] * stats.multivariate_normal(means[k, r], np.diag(var[k, r])).pdf(Xk)
                                for r in range(weights.shape[1])])
        sl = slice(data.offsets[k], data.offsets[k + 1])
        np.testing.assert_allclose(log_norm[sl], np.log(dens.sum(1)), rtol=1e-10)
        np.testing.assert_allclose(np.exp(log_resp[sl]), dens / dens.sum(1, keepdims=True), atol=1e-12)


def test_spherical_variance_broadcasts_over_coordinates(rng):
    data, weights, means, var = _random_problem(rng, s=1)
    full = np.repeat(var, data.n_features, axis=-1)
    a = kernels.gaussian_log_resp(data.X, data.offsets, weights, means, var)
    b = kernels.gaussian_log_resp(data.X, data.offsets, weights, means, full)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-12)


def test_regression_log_density_matches_scipy(rng):
    K, R, d = 2, 3, 4
    X = [rng.randn(20, d) for _ in range(K)]
    y = [rng.randn(20) for _ in range(K)]
    data = FederatedData.from_input(X, y)
    weights = rng.dirichlet(np.ones(R), size=K)
    coef = rng.randn(K, R, d)
    noise = rng.uniform(0.5, 2, size=(K, R, 1))
    log_norm, _ = kernels.regression_log_resp(data.X, data.y, data.offsets, weights, coef, noise)
    for k in range(K):
        dens = sum(weights[k, r] * stats.norm(X[k] @ coef[k, r], np.sqrt(noise[k, r, 0])).pdf(y[k]) for r in range(R))
        np.testing.assert_allclose(log_norm[20 * k:20 * (k + 1)], np.log(dens), rtol=1e-10)


def _one_client(data, k):
    X, y = data.client(k)
    return FederatedData.from_input([X], None if y is None else [y])


def test_batched_estep_equals_per_client_estep(rng):
    """The in-process engine's one call over all clients equals each client's own computation."""
    data, weights, means, var = _random_problem(rng, K=4)
    y = rng.randn(len(data.X))
    data_y = FederatedData(data.X, y, data.offsets, data.client_ids)
    batched_g = kernels.gaussian_estep(data.X, data.offsets, weights, means, var, "coordinates")
    batched_r = kernels.regression_estep(data_y.X, y, data.offsets, weights, means, var[..., :1])
    for k in range(data.n_clients):
        one = _one_client(data_y, k)
        single_g = kernels.gaussian_estep(one.X, one.offsets, weights[k:k + 1], means[k:k + 1], var[k:k + 1], "coordinates")
        single_r = kernels.regression_estep(one.X, one.y, one.offsets, weights[k:k + 1], means[k:k + 1],
                                            var[k:k + 1, :, :1])
        for a, b in zip(batched_g + batched_r, single_g + single_r):
            np.testing.assert_allclose(a[k], b[0], rtol=1e-12, atol=1e-12)


def test_variances_broadcast_from_one_row_give_the_numbers_of_their_copies(rng):
    """The compiled E-step factors variances broadcast from one client's row (the pooled start's) once: the numbers
    of the same variances copied to every client, for each covariance layout."""
    compiled = get_kernels("numba")
    data, weights, means, _ = _random_problem(rng, K=5, R=3, d=3)
    A = rng.randn(3, 3, 3)
    for row in (rng.uniform(0.5, 2.0, (1, 3, 1)), rng.uniform(0.5, 2.0, (1, 3, 3)),
                (A @ np.swapaxes(A, 1, 2) + np.eye(3)).reshape(1, 3, 9)):
        shared = np.broadcast_to(row, (5,) + row.shape[1:])
        for squares in ("none", "coordinates", "outer"):
            one, copies = (compiled.gaussian_estep(data.X, data.offsets, weights, means, v, squares)
                           for v in (shared, shared.copy()))
            assert all(a is b or np.array_equal(a, b) for a, b in zip(one, copies))
        for a, b in zip(*(compiled.gaussian_log_resp(data.X, data.offsets, weights, means, v)
                          for v in (shared, shared.copy()))):
            assert np.array_equal(a, b)


def test_stats_from_hard_labels_are_group_sums(rng):
    data, *_ = _random_problem(rng, K=2, R=3)
    labels = rng.randint(3, size=len(data.X))
    resp = np.eye(3)[labels]
    N, Sx, Sxx = kernels.gaussian_stats(data.X, data.offsets, resp, "coordinates")
    _, _, total = kernels.gaussian_stats(data.X, data.offsets, resp, "total")
    np.testing.assert_allclose(total[..., 0], Sxx.sum(axis=-1))
    for k in range(2):
        sl = slice(data.offsets[k], data.offsets[k + 1])
        for r in range(3):
            rows = data.X[sl][labels[sl] == r]
            assert N[k, r] == len(rows)
            np.testing.assert_allclose(Sx[k, r], rows.sum(0))
            np.testing.assert_allclose(Sxx[k, r], (rows ** 2).sum(0))


@given(scale=st.sampled_from([1.0, 1e3, 1e6]), gap=st.sampled_from([0.0, 1e-9, 1e-3, 10.0]),
       seed=st.integers(0, 1000), log_w_min=st.sampled_from([-1.0, -30.0]))
def test_posterior_rows_sum_to_one_and_stay_finite(scale, gap, seed, log_w_min):
    """Entries of size 1e6, near-duplicate and far-apart components, tiny weights."""
    rng = np.random.RandomState(seed)
    R, d = 3, 4
    X = scale * rng.randn(25, d)
    means = scale * rng.randn(1, 1, d) + gap * rng.randn(1, R, d)
    weights = np.exp(np.array([[0.0, log_w_min, -0.5]]))
    weights /= weights.sum()
    var = np.ones((1, R, 1))
    offsets = np.array([0, 25])
    log_norm, log_resp = kernels.gaussian_log_resp(X, offsets, weights, means, var)
    resp = np.exp(log_resp)
    assert np.all(np.isfinite(log_norm)) and np.all(np.isfinite(resp))
    np.testing.assert_allclose(resp.sum(axis=1), 1.0, rtol=1e-12)
    y = scale * rng.randn(25)
    log_norm, log_resp = kernels.regression_log_resp(X, y, offsets, weights, means / scale, var)
    assert np.all(np.isfinite(log_norm))
    np.testing.assert_allclose(np.exp(log_resp).sum(axis=1), 1.0, rtol=1e-12)
