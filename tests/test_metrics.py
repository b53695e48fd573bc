import numpy as np
from hypothesis import given, strategies as st

from fedmm.metrics import best_permutation, estimation_errors
from fedmm.simulate import PAPER_CENTERS


@given(perm=st.permutations(range(5)), seed=st.integers(0, 100))
def test_a_permuted_perfect_estimate_has_zero_error(perm, seed):
    rng = np.random.RandomState(seed)
    theta = PAPER_CENTERS[None] + 0.1 * rng.randn(3, 5, 10)
    weights = rng.dirichlet(np.ones(5), size=3)
    perm = np.array(perm)
    w_err, t_err = estimation_errors(weights[:, perm], theta[:, perm], weights, theta)
    np.testing.assert_array_equal(w_err, 0.0)
    np.testing.assert_array_equal(t_err, 0.0)
    np.testing.assert_array_equal(perm[best_permutation(theta[0, perm], theta[0])], np.arange(5))


def test_errors_are_the_maximum_over_components():
    theta = np.zeros((1, 2, 2))
    theta[0, 1] = [10.0, 0.0]
    est = theta.copy()
    est[0, 0] = [0.0, 0.3]
    est[0, 1] = [10.4, 0.0]
    w_err, t_err = estimation_errors(np.array([[0.45, 0.55]]), est, np.array([[0.5, 0.5]]), theta)
    np.testing.assert_allclose(t_err, [0.4])
    np.testing.assert_allclose(w_err, [0.05])
