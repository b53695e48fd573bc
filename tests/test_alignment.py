import itertools
from math import factorial

import numpy as np
import pytest
from conftest import COPIES, kernel_copies
from hypothesis import given, strategies as st

from fedmm.alignment import bottleneck, _consensus, _enclosing_radius, align, check_assumptions, score


def _scrambled(truth, rng):
    """Relabel each client at random: component true_perm[k, r] of client k is truth r."""
    K, R, _ = truth.shape
    true_perm = np.array([rng.permutation(R) for _ in range(K)])
    theta = np.empty_like(truth)
    theta[np.arange(K)[:, None], true_perm] = truth
    return theta, true_perm


def _aligned_up_to_one_relabelling(perms, true_perm):
    truth_label = np.argsort(true_perm, axis=1)[np.arange(len(perms))[:, None], perms]  # truth index of label r
    return bool(np.all(truth_label == truth_label[0]))


def _well_separated_truth(rng, K, R, p, delta=6.0):
    """Centres at least `delta` apart; clients within h = delta/8, estimates within e0 = delta/16 of
    the truth: (2 + 2 eps)/(1 - eps) h + (4 + 4 eps)/(1 - eps) e0 = delta/2 < Delta (Assumption C.1, eps = 0)."""
    centers = [rng.randn(p)]
    while len(centers) < R:
        c = 3 * delta * rng.randn(p)
        if min(np.linalg.norm(c - x) for x in centers) >= delta + delta / 4:
            centers.append(c)
    unit = lambda z: z / np.linalg.norm(z, axis=-1, keepdims=True)  # noqa: E731
    truth = np.array(centers) + delta / 8 * unit(rng.randn(K, R, p))
    estimate = truth + delta / 16 * rng.uniform(0, 1, (K, R, 1)) * unit(rng.randn(K, R, p))
    return truth, estimate


def _max_k_exhaustive(R, budget=10 ** 8):
    return min(8, max(k for k in range(2, 40) if factorial(R) ** (k - 1) <= budget))


@given(R=st.integers(2, 5), data=st.data(), seed=st.integers(0, 10 ** 6))
def test_exhaustive_undoes_random_relabelling(R, data, seed):
    K = data.draw(st.integers(2, _max_k_exhaustive(R)), label="K")
    rng = np.random.RandomState(seed)
    truth, estimate = _well_separated_truth(rng, K, R, 3)
    assert check_assumptions(estimate, truth)["C.1"].holds
    theta, true_perm = _scrambled(estimate, rng)
    assert _aligned_up_to_one_relabelling(align(theta, "exhaustive").perms, true_perm)


@given(method=st.sampled_from(["consensus", "stepwise", "greedy"]), R=st.integers(2, 8),
       K=st.integers(2, 40), seed=st.integers(0, 10 ** 6))
def test_polynomial_methods_undo_random_relabelling(method, R, K, seed):
    rng = np.random.RandomState(seed)
    truth, estimate = _well_separated_truth(rng, K, R, 4)
    theta, true_perm = _scrambled(estimate, rng)
    result = align(theta, method, n_orders=5, random_state=seed)
    assert result.perms.shape == (K, R)
    assert _aligned_up_to_one_relabelling(result.perms, true_perm)


def _brute_force(theta):
    K, R, _ = theta.shape
    perms = list(itertools.permutations(range(R)))
    best = min(itertools.product(perms, repeat=K - 1),
               key=lambda rest: score(theta, np.array((tuple(range(R)),) + rest)))
    return score(theta, np.array((tuple(range(R)),) + best))


@given(K=st.integers(2, 4), R=st.integers(2, 3), seed=st.integers(0, 10 ** 6))
def test_exhaustive_branch_and_bound_finds_the_brute_force_minimum(K, R, seed):
    """On unstructured inputs (no margin at all), pruning must never cut the optimum."""
    theta = np.random.RandomState(seed).randn(K, R, 2)
    assert align(theta, "exhaustive").score == pytest.approx(_brute_force(theta), rel=1e-12)


def test_exhaustive_refuses_beyond_its_budget():
    theta = np.random.RandomState(0).randn(8, 5, 2)
    with pytest.raises(ValueError, match=r"120\^7 = 3\.58e\+14 labellings.*alignment='consensus'"):
        align(theta, "exhaustive")
    assert align(theta[:3], "exhaustive", max_candidates=14400).perms.shape == (3, 5)


def test_score_by_hand():
    theta = np.array([[[0.0, 0.0], [4.0, 0.0]], [[4.0, 3.0], [0.0, 1.0]]])
    # Identity labels: |(0,0)-(4,3)| + |(4,0)-(0,1)| = 5 + sqrt(17), counted for (1,2) and (2,1).
    assert score(theta, np.array([[0, 1], [0, 1]])) == pytest.approx(2 * (5 + np.sqrt(17)))
    assert score(theta, np.array([[0, 1], [1, 0]])) == pytest.approx(2 * (1 + 3))
    assert align(theta, "exhaustive").score == pytest.approx(8.0)


def test_stepwise_follows_the_given_order():
    rng = np.random.RandomState(1)
    truth, estimate = _well_separated_truth(rng, 5, 3, 2)
    theta, true_perm = _scrambled(estimate, rng)
    a = align(theta, "stepwise", order=[3, 1, 0, 4, 2])
    np.testing.assert_array_equal(a.perms[3], [0, 1, 2])  # the first client in the order keeps its labels
    assert _aligned_up_to_one_relabelling(a.perms, true_perm)


def _outliers_first():
    """Three adversarial clients listed first, seven inliers (eps = 0.3 < 1/2).

    Inliers: components near (-1, 0) and (1, 0), their heights tilted by +-0.5 in alternation.
    Outliers: components at (0, 100) and (0, -100). Matching an inlier to an outlier costs
    about 200 - (y_a - y_b) one way and 200 + (y_a - y_b) the other, so each outlier pulls the
    inlier's labels by 2 |y_a - y_b| = 2, three of them by 6, and flips its preference from one
    inlier to the next; agreeing with one earlier inlier is only worth about 2 * (4 - 2) = 4.
    """
    tilt = np.array([[[0.0, 0.5], [0.0, -0.5]], [[0.0, -0.5], [0.0, 0.5]]])
    centers = np.array([[-1.0, 0.0], [1.0, 0.0]])
    inliers = np.array([centers + tilt[j % 2] for j in range(7)])
    outliers = np.repeat(np.array([[[0.0, 100.0], [0.0, -100.0]]]), 3, axis=0)
    return np.concatenate([outliers, inliers]), np.array([True] * 3 + [False] * 7)


def test_outliers_first_break_stepwise_but_not_consensus():
    truth, outliers = _outliers_first()
    checks = check_assumptions(truth, truth, outliers)
    assert checks["C.1"].holds and not checks["C.3"].holds  # the paper's conditions say as much
    theta, true_perm = _scrambled(truth, np.random.RandomState(0))
    inl = ~outliers
    stepwise = align(theta, "stepwise")
    consensus = align(theta, "consensus")
    assert not _aligned_up_to_one_relabelling(stepwise.perms[inl], true_perm[inl])
    assert _aligned_up_to_one_relabelling(consensus.perms[inl], true_perm[inl])
    # With the inliers first, stepwise aligns them here too, although C.3 (a sufficient condition) still
    # fails: K0 = 7 > K eps = 3, but 2 (7+3)/(7-3) h = 2.5 > Delta = 2.24.
    order = np.r_[3:10, 0:3]
    c3 = check_assumptions(truth, truth, outliers, order=order)["C.3"]
    assert c3.conditions[1].holds and not c3.conditions[0].holds
    assert _aligned_up_to_one_relabelling(align(theta, "stepwise", order=order).perms[inl], true_perm[inl])


def test_consensus_medoid_from_a_sample_of_many_clients_aligns_every_inlier():
    """Above 1,000 clients the medoid's totals are over 1,000 drawn at random: with a third of the
    clients outliers placed first, every inlier still ends in one labelling."""
    rng = np.random.RandomState(5)
    K, R, p = 1500, 4, 3
    centers = 4.0 * np.eye(R, p)
    truth = centers[None] + 0.3 * rng.randn(K, R, p)
    truth[:500] = 20.0 + 3.0 * rng.randn(500, R, p)
    theta, true_perm = _scrambled(truth, rng)
    perms = align(theta, "consensus", random_state=0).perms
    assert _aligned_up_to_one_relabelling(perms[500:], true_perm[500:])
    # The same alignment as from the full sums, up to one relabelling of all clients.
    full = _consensus(theta, np.random.RandomState(0), n_medoid_sample=K)
    assert _aligned_up_to_one_relabelling(_consensus(theta, np.random.RandomState(0)), full)


def test_greedy_keeps_the_best_of_its_random_orders():
    theta = np.random.RandomState(2).randn(12, 4, 3)
    a = align(theta, "greedy", n_orders=10, random_state=3)
    np.testing.assert_array_equal(a.perms, align(theta, "greedy", n_orders=10, random_state=3).perms)
    rng = np.random.RandomState(3)
    scores = [align(theta, "stepwise", order=rng.permutation(12)).score for _ in range(10)]
    assert a.score == pytest.approx(min(scores))
    assert min(scores) < max(scores)  # the orders matter on unstructured input, so the choice is real


def test_check_assumptions_numbers():
    truth = np.array([[[0.0, 0.0], [10.0, 0.0]], [[0.0, 2.0], [10.0, 2.0]]])  # h = 1, Delta = 10
    estimate = truth + np.array([0.5, 0.0])                                   # e0 = 0.5
    c1 = check_assumptions(estimate[:, ::-1], truth)["C.1"]                   # labels reversed: e0 still 0.5
    assert c1.quantities["h"] == pytest.approx(1.0, abs=1e-6)
    assert c1.quantities["Delta"] == pytest.approx(10.0)
    assert c1.quantities["e0"] == pytest.approx(0.5)
    assert c1.conditions[0].rhs == pytest.approx(2 * 1.0 + 4 * 0.5, abs=1e-6)
    assert c1.holds and "holds" in str(c1)


def testbottleneck_and_enclosing_radius():
    cost = np.array([[1.0, 9.0], [2.0, 3.0]])
    assert bottleneck(cost) == 3.0  # identity: max(1, 3) = 3; swap: max(9, 2) = 9
    square = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0], [0.0, 0.5]])
    assert _enclosing_radius(square) == pytest.approx(np.sqrt(2), rel=1e-6)


def test_unknown_method():
    with pytest.raises(ValueError, match="Unknown alignment method"):
        align(np.zeros((2, 2, 1)), "magic")


@COPIES
@given(st.integers(1, 30), st.integers(1, 7), st.integers(2, 4), st.integers(0, 10 ** 6))
def test_a_batch_of_matchings_is_each_clients_hungarian_matching(parallel, K, R, p, seed):
    """The batched matching to a reference (every permutation at once, compiled, for R <= 5; Hungarian
    beyond) finds each client's optimal labelling: the same total as scipy's Hungarian algorithm on the
    client's cost matrix, and the same permutation (distances in two or more dimensions have one optimum;
    on a line they tie often)."""
    from scipy.optimize import linear_sum_assignment

    from fedmm.alignment import _cost, _match_to
    rng = np.random.RandomState(seed)
    reference, theta = rng.standard_normal((R, p)), rng.standard_normal((K, R, p))
    with kernel_copies(parallel):
        perms, totals = _match_to(reference, theta)
    for k in range(K):
        cost = _cost(reference, theta[k])
        rows, cols = linear_sum_assignment(cost)
        np.testing.assert_array_equal(perms[k], cols)
        np.testing.assert_allclose(totals[k], cost[rows, cols].sum(), rtol=1e-12)
