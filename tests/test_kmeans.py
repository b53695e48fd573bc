import numpy as np
import pytest
from conftest import COPIES, kernel_copies
from hypothesis import given, settings, strategies as st
from sklearn.cluster import KMeans

from fedmm.data import FederatedData
from fedmm.families import GaussianFamily
from fedmm.kmeans import (N_INIT, RESTART_POINTS, best_kmeans_labels, kmeans_labels, kmeans_labels_clients,
                          kmeans_plus_plus, kmeans_runs, lloyd_labels, n_runs, n_uniforms, seeding_uniforms)
from fedmm.simulate import make_federated_gmm


@COPIES
@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(3, 40), min_size=1, max_size=6), st.integers(1, 4), st.integers(1, 5),
       st.integers(0, 10 ** 6))
def test_the_compiled_batch_equals_the_numpy_reference_client_by_client(parallel, sizes, d, R, seed):
    rng = np.random.RandomState(seed)
    R = min(R, min(sizes))
    X = [rng.standard_normal((n, d)) + 3 * rng.randint(0, 2, (n, 1)) for n in sizes]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    U = seeding_uniforms(seed + np.arange(len(sizes)), R)
    with kernel_copies(parallel):
        batch = kmeans_labels_clients(np.vstack(X), offsets, R, U)
    np.testing.assert_array_equal(batch, np.concatenate([kmeans_labels(x, R, u) for x, u in zip(X, U)]))
    assert batch.min() >= 0 and batch.max() < R


def test_a_clients_start_is_the_same_alone_or_in_a_batch():
    X, _ = make_federated_gmm(5, 60, random_state=1)
    data = FederatedData.from_input(X)
    family = GaussianFamily("diag")
    batch = family.initial_resp_clients(data, 4, [11, 12, 13, 14, 15])
    alone = np.concatenate([family.initial_resp(x, None, 4, np.random.RandomState(s))
                            for x, s in zip(X, [11, 12, 13, 14, 15])])
    np.testing.assert_array_equal(batch, alone)


def test_the_clusterings_are_as_good_as_scikit_learns():
    """Same algorithm (greedy k-means++, Lloyd), other random numbers: the mean inertia over 10 clients x 10
    seeds of the paper's design matches scikit-learn's KMeans(n_init=1) within 2%."""
    X, _ = make_federated_gmm(10, 150, random_state=0)

    def inertia(x, labels):
        return sum(((x[labels == r] - x[labels == r].mean(axis=0)) ** 2).sum() for r in np.unique(labels))
    ours = np.mean([inertia(x, kmeans_labels(x, 5, seeding_uniforms([s], 5)[0])) for x in X for s in range(10)])
    theirs = np.mean([inertia(x, KMeans(5, n_init=1, random_state=s).fit(x).labels_) for x in X for s in range(10)])
    assert ours <= 1.02 * theirs


def test_repeated_rows_leave_no_label_out_of_range():
    X = np.repeat(np.arange(3.0)[:, None], 10, axis=0)            # 30 rows, 3 distinct points, R = 5
    labels = kmeans_labels_clients(X, [0, 30], 5, seeding_uniforms([0], 5))
    assert labels.min() >= 0 and labels.max() < 5
    np.testing.assert_array_equal(labels, kmeans_labels(X, 5, seeding_uniforms([0], 5)[0]))


def test_lloyd_stops_where_scikit_learn_does():
    """On rows with no clusters the labels keep changing for hundreds of iterations; both stop once the
    centres move less than 1e-4 times the mean variance, and from the same centres reach the same labels."""
    X = np.random.RandomState(3).standard_normal((3000, 4))
    for seed in range(3):
        centers = kmeans_plus_plus(X, 5, seeding_uniforms([seed], 5)[0])
        theirs = KMeans(5, init=centers, n_init=1, algorithm="lloyd").fit(X)
        assert 5 < theirs.n_iter_ < 300
        np.testing.assert_array_equal(lloyd_labels(X, centers), theirs.labels_)


@pytest.mark.parametrize("R", [1, 5, 60])
def test_each_clients_uniforms_are_its_own_generators_first_ones(R):
    """The compiled generator is numpy's RandomState(seed), also past its first 624 words (R = 60: 355 uniforms)."""
    seeds = [7, 0, 7, 2 ** 32 - 1, 2 ** 31] + list(np.random.RandomState(R).randint(2 ** 31 - 1, size=20))
    U = seeding_uniforms(seeds, R)
    for row, seed in zip(U, seeds):
        np.testing.assert_array_equal(row, np.random.RandomState(seed).random_sample(U.shape[1]))
    with pytest.raises(ValueError, match="Seed must be between"):
        seeding_uniforms([2 ** 32], R)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=3, max_size=12), st.integers(1, 3), st.integers(0, 10 ** 6))
def test_a_rows_integer_weight_counts_as_that_many_copies_of_it(counts, R, seed):
    """Weighted k-means (the server's clustering of the clients' own centres) is k-means on the rows each
    repeated by its weight: the same k-means++ centres and the same labels."""
    X = np.random.RandomState(seed).standard_normal((len(counts), 2))
    R = min(R, len(counts))
    u = seeding_uniforms([seed], R)[0]
    repeated = np.repeat(X, counts, axis=0)
    np.testing.assert_array_equal(kmeans_plus_plus(X, R, u, sample_weight=counts), kmeans_plus_plus(repeated, R, u))
    labels = kmeans_labels(X, R, u, sample_weight=counts)
    np.testing.assert_array_equal(np.repeat(labels, counts), kmeans_labels(repeated, R, u))


def test_weighted_lloyd_reaches_scikit_learns_labels():
    X = np.random.RandomState(4).standard_normal((600, 3)) + 8 * (np.arange(600) % 4)[:, None]
    w = np.random.RandomState(5).gamma(2.0, size=600)
    centers = kmeans_plus_plus(X, 4, seeding_uniforms([1], 4)[0], sample_weight=w)
    theirs = KMeans(4, init=centers, n_init=1, algorithm="lloyd").fit(X, sample_weight=w)
    np.testing.assert_array_equal(lloyd_labels(X, centers, sample_weight=w), theirs.labels_)


def test_the_best_of_several_runs_has_the_lowest_inertia_and_the_first_is_the_single_run():
    X = np.random.RandomState(6).standard_normal((200, 2)) + 5 * (np.arange(200) % 5)[:, None]
    w = np.random.RandomState(7).gamma(2.0, size=200)

    def inertia(labels):
        return sum(w[labels == r] @ ((X[labels == r] - w[labels == r] @ X[labels == r] / w[labels == r].sum()) ** 2
                                     ).sum(axis=1) for r in np.unique(labels))
    one = best_kmeans_labels(X, 5, np.random.RandomState(0), w, n_init=1)
    rng = np.random.RandomState(0)
    np.testing.assert_array_equal(one, kmeans_labels(X, 5, rng.random_sample(n_uniforms(5)), sample_weight=w))
    runs = [kmeans_labels(X, 5, rng.random_sample(n_uniforms(5)), sample_weight=w) for _ in range(9)]
    best = best_kmeans_labels(X, 5, np.random.RandomState(0), w, n_init=10)
    assert np.isclose(inertia(best), min(inertia(r) for r in [one] + runs))


def _weighted_inertia(X, w, labels):
    """The numpy form of the weighted inertia at the clusters' weighted means."""
    member = np.eye(labels.max() + 1)[labels] * w[:, None]
    centers = member.T @ X / np.maximum(member.sum(axis=0), np.finfo(float).tiny)[:, None]
    return w @ ((X - centers[labels]) ** 2).sum(axis=1)


@COPIES
@settings(max_examples=30, deadline=None)
@given(st.integers(2, 300), st.integers(1, 4), st.integers(1, 5), st.integers(1, 4), st.integers(0, 10 ** 6))
def test_the_compiled_weighted_runs_equal_the_numpy_reference_run_by_run(parallel, n, d, R, runs, seed):
    """The server's k-FED clustering (weighted, some weights zero, as a client's empty component's) in one
    compiled call gives every run the labels of the numpy oracle with that run's uniforms, and its inertia."""
    rng = np.random.RandomState(seed)
    R = min(R, n)
    X = rng.standard_normal((n, d)) + 4 * rng.randint(0, 3, (n, 1))
    w = rng.gamma(1.0, 50.0, size=n) * (rng.random_sample(n) > 0.1)
    w[0] = max(w[0], 1.0)
    U = rng.random_sample((runs, n_uniforms(R)))
    with kernel_copies(parallel):
        labels, inertia = kmeans_runs(X, R, U, w)
    for run, u in enumerate(U):
        reference = kmeans_labels(X, R, u, sample_weight=w)
        np.testing.assert_array_equal(labels[run], reference)
        np.testing.assert_allclose(inertia[run], _weighted_inertia(X, w, reference), rtol=1e-9, atol=1e-9)


def test_the_best_run_is_the_numpy_references_best_and_the_generator_moves_on_alike():
    """best_kmeans_labels equals the numpy loop it replaced (the best of N_INIT reference runs, each with the
    next uniforms), and leaves the generator where that loop left it."""
    X, _ = make_federated_gmm(40, 20, random_state=2)
    X = np.vstack(X)
    w = np.random.RandomState(8).gamma(2.0, size=len(X))
    ours, theirs = np.random.RandomState(9), np.random.RandomState(9)
    runs = [kmeans_labels(X, 5, theirs.random_sample(n_uniforms(5)), sample_weight=w) for _ in range(N_INIT)]
    best = runs[int(np.argmin([_weighted_inertia(X, w, r) for r in runs]))]
    np.testing.assert_array_equal(best_kmeans_labels(X, 5, ours, w), best)
    assert ours.randint(2 ** 31) == theirs.randint(2 ** 31)


def test_many_points_get_fewer_runs_and_the_generator_moves_on_alike():
    assert n_runs(10) == n_runs(RESTART_POINTS // N_INIT) == N_INIT
    assert n_runs(RESTART_POINTS // 2) == 2 and n_runs(10 * RESTART_POINTS) == 1
    X = np.random.RandomState(10).standard_normal((RESTART_POINTS // 4, 1))
    rng = np.random.RandomState(11)
    runs = [kmeans_labels(X, 2, u) for u in rng.random_sample((N_INIT, n_uniforms(2)))[:4]]
    best = runs[int(np.argmin([_weighted_inertia(X, np.ones(len(X)), r) for r in runs]))]
    ours = np.random.RandomState(11)
    np.testing.assert_array_equal(best_kmeans_labels(X, 2, ours), best)
    assert ours.randint(2 ** 31) == rng.randint(2 ** 31)
