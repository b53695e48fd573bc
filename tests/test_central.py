import numpy as np
import pytest
from hypothesis import given, strategies as st

from fedmm.central import central_update

problems = st.tuples(st.integers(2, 8), st.integers(1, 3), st.integers(1, 4), st.integers(0, 10 ** 6),
                     st.sampled_from([0.1, 1.0, 5.0, 30.0]), st.booleans())


def _problem(K, R, p, seed, equal_sizes):
    rng = np.random.RandomState(seed)
    theta = rng.randn(1, R, p) + 0.5 * rng.randn(K, R, p)
    theta[0] += 6.0 * rng.randn(R, p)  # one far client
    n_k = np.full(K, 100.0) if equal_sizes else rng.randint(20, 400, size=K).astype(float)
    return theta, n_k


@pytest.mark.parametrize("solver", ["irls", "irls-numpy", "alternating"])
@given(args=problems)
def test_subgradient_optimality_conditions_hold(solver, args):
    """KKT of min sum_k n_k/2 ||nu_k - theta_k||^2 + sqrt(n_k) lam ||nu_k - nu_bar||:
    sum_k n_k (theta_k - nu_k) = 0; a pooled client lies within lam / sqrt(n_k) of nu_bar;
    an unpooled one satisfies nu_k - theta_k + lam / sqrt(n_k) (nu_k - nu_bar) / ||nu_k - nu_bar|| = 0."""
    K, R, p, seed, lam, equal = args
    theta, n_k = _problem(K, R, p, seed, equal)
    res = central_update(theta, n_k, lam, solver=solver, max_iter=200_000)
    assert res.converged
    scale = n_k.sum() * (1 + np.abs(theta).max())
    np.testing.assert_allclose((n_k[:, None, None] * (theta - res.nu)).sum(axis=0), 0.0, atol=1e-7 * scale)
    thr = lam / np.sqrt(n_k)
    gap = np.linalg.norm(theta - res.center, axis=-1)
    assert np.all(gap[res.pooled] <= (thr[:, None] * (1 + 1e-6) + 1e-9).repeat(R, axis=1)[res.pooled])
    np.testing.assert_array_equal(res.nu[res.pooled], np.broadcast_to(res.center, res.nu.shape)[res.pooled])
    d = res.nu - res.center
    unit = d / np.maximum(np.linalg.norm(d, axis=-1, keepdims=True), 1e-300)
    resid = (res.nu - theta + thr[:, None, None] * unit)[~res.pooled]
    np.testing.assert_allclose(resid, 0.0, atol=1e-7 * (1 + np.abs(theta).max()))


@given(problems)
def test_objective_is_minimal_against_perturbations(args):
    K, R, p, seed, lam, equal = args
    theta, n_k = _problem(K, R, p, seed, equal)
    res = central_update(theta, n_k, lam)

    def objective(nu, center):
        return _objective(theta, n_k, lam, res._replace(nu=nu, center=center))

    best = objective(res.nu, res.center)
    rng = np.random.RandomState(seed + 1)
    for _ in range(20):
        step = 1e-3 * rng.randn(*theta.shape)
        assert objective(res.nu + step, res.center + 1e-3 * rng.randn(R, p)) >= best - 1e-9 * abs(best)


@given(problems)
def test_infinite_penalty_gives_the_weighted_mean_and_zero_returns_the_inputs(args):
    K, R, p, seed, _, equal = args
    theta, n_k = _problem(K, R, p, seed, equal)
    mean = (n_k[:, None, None] * theta).sum(axis=0) / n_k.sum()
    res = central_update(theta, n_k, np.inf)
    np.testing.assert_allclose(res.nu, np.broadcast_to(mean, theta.shape), atol=1e-12)
    assert res.pooled.all()
    np.testing.assert_allclose(central_update(theta, n_k, 0.0).nu, theta, atol=1e-12)


@given(problems, st.randoms(use_true_random=False))
def test_client_order_does_not_matter(args, random):
    K, R, p, seed, lam, equal = args
    theta, n_k = _problem(K, R, p, seed, equal)
    order = list(range(K))
    random.shuffle(order)
    a = central_update(theta, n_k, lam)
    b = central_update(theta[order], n_k[order], lam)
    np.testing.assert_allclose(b.nu, a.nu[order], atol=1e-8 * (1 + np.abs(theta).max()))
    np.testing.assert_allclose(b.center, a.center, atol=1e-8 * (1 + np.abs(theta).max()))
    np.testing.assert_array_equal(b.pooled, a.pooled[order])


def test_the_far_client_is_not_pooled_and_barely_moves_the_centre():
    rng = np.random.RandomState(0)
    theta = 0.05 * rng.randn(10, 1, 3)
    theta[0] += 100.0
    res = central_update(theta, np.full(10, 150.0), 7.8)
    assert not res.pooled[0, 0] and res.pooled[1:, 0].all()
    # Huber influence: the far client moves the centre by at most lam/sqrt(n) / K per coordinate direction.
    assert np.linalg.norm(res.center[0] - theta[1:, 0].mean(axis=0)) < 7.8 / np.sqrt(150) / 9 + 0.01
    # ... while the mean is dragged by 10 units.
    assert np.linalg.norm(theta[:, 0].mean(axis=0) - theta[1:, 0].mean(axis=0)) > 10


def test_iteration_cap_is_reported():
    theta, n_k = _problem(6, 2, 3, 0, True)
    res = central_update(theta, n_k, 1.0, max_iter=1)
    assert res.n_iter == 1 and not res.converged


def _objective(theta, n_k, lam, res):
    return (0.5 * n_k[:, None] * ((res.nu - theta) ** 2).sum(-1)
            + np.sqrt(n_k)[:, None] * lam * np.linalg.norm(res.nu - res.center, axis=-1)).sum()


@given(problems)
def test_the_two_solvers_agree(args):
    """Same objective value (the minimizer can be nearly flat along a segment, the value cannot),
    and IRLS never ends worse than the paper's alternating scheme."""
    K, R, p, seed, lam, equal = args
    theta, n_k = _problem(K, R, p, seed, equal)
    a = _objective(theta, n_k, lam, central_update(theta, n_k, lam))
    b = _objective(theta, n_k, lam, central_update(theta, n_k, lam, solver="alternating", max_iter=200_000))
    assert a == pytest.approx(b, rel=1e-8, abs=1e-8)
    assert a <= b + 1e-9 * abs(b)


@given(args=problems, per_component=st.booleans(), lam=st.sampled_from([0.3, 7.8, np.inf]))
def test_the_compiled_loop_agrees_with_the_numpy_reference(args, per_component, lam):
    """The Numba IRLS loop against the numpy one, step for step: same iterations, same answer to rounding."""
    K, R, p, seed, _, equal = args
    theta, n_k = _problem(K, R, p, seed, equal)
    if per_component:
        n_k = n_k[:, None] * np.random.RandomState(seed).dirichlet(np.ones(R), size=K) * R
    fast = central_update(theta, n_k, lam, solver="irls")
    slow = central_update(theta, n_k, lam, solver="irls-numpy")
    assert fast.n_iter == slow.n_iter and fast.converged == slow.converged
    np.testing.assert_allclose(fast.center, slow.center, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fast.nu, slow.nu, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(fast.pooled, slow.pooled)
