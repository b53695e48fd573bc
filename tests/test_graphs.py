"""Communication graphs and mixing matrices (issue 14, item 1)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedmm import graphs as G


def test_shapes_and_degrees():
    assert G.complete(5).sum(axis=1).tolist() == [4] * 5
    assert G.ring(6).sum(axis=1).tolist() == [2] * 6
    assert G.torus(3, 4).sum(axis=1).tolist() == [4] * 12
    assert G.k_regular(8, 3).sum(axis=1).tolist() == [3] * 8
    assert not G.complete(5).diagonal().any()


@pytest.mark.parametrize("A", [np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]]), np.zeros((4, 4))])
def test_disconnected_graphs_are_refused(A):
    with pytest.raises(ValueError, match="not connected"):
        G.adjacency(A)


@pytest.mark.parametrize("A, match", [(np.ones((2, 3)), "square"), (np.array([[0, 2], [2, 0]]), "0 .* and 1"),
                                      (np.array([[0, 1, 1], [0, 0, 1], [1, 1, 0]]), "symmetric")])
def test_bad_adjacency_matrices_are_refused(A, match):
    with pytest.raises(ValueError, match=match):
        G.adjacency(A)


def test_erdos_renyi_is_reproducible_and_checked():
    np.testing.assert_array_equal(G.erdos_renyi(12, 0.5, 3), G.erdos_renyi(12, 0.5, 3))
    with pytest.raises(ValueError, match="not connected"):
        G.erdos_renyi(30, 0.01, 0)


def test_metropolis_hastings_on_the_complete_graph_averages_in_one_step():
    W = G.metropolis_hastings(G.complete(6))
    np.testing.assert_allclose(W, np.full((6, 6), 1 / 6))
    assert G.spectral_gap(W) == pytest.approx(1.0)


def test_spectral_gap_of_the_ring_has_its_closed_form():
    """MH on a ring puts 1/3 on each neighbour and itself: eigenvalues (1 + 2 cos(2 pi m / K)) / 3."""
    K = 9
    lam = (1 + 2 * np.cos(2 * np.pi * np.arange(K) / K)) / 3
    expected = 1 - np.sort(np.abs(lam))[-2]
    assert G.spectral_gap(G.metropolis_hastings(G.ring(K))) == pytest.approx(expected)


def _connected_erdos_renyi(K, seed):
    """An Erdos-Renyi(K, 0.6) draw, or the ring when the draw is disconnected (and refused)."""
    try:
        return G.erdos_renyi(K, 0.6, seed)
    except ValueError:
        return G.ring(K)


graphs = st.one_of(st.builds(G.ring, st.integers(3, 12)), st.builds(G.torus, st.integers(2, 4), st.integers(2, 4)),
                   st.builds(_connected_erdos_renyi, st.integers(3, 10), st.integers(0, 10 ** 6)))


@settings(max_examples=30, deadline=None)
@given(A=graphs)
def test_mixing_matrices_are_doubly_stochastic_on_the_graph_and_fastest_mixes_at_least_as_fast(A):
    mh, fast = G.metropolis_hastings(A), G.fastest_mixing(A, max_iter=100)
    for W in (mh, fast):
        G.check_mixing(W, A)
        assert G.spectral_gap(W) > 0
    assert G.spectral_gap(fast) >= G.spectral_gap(mh) - 1e-12


def test_fastest_mixing_reaches_the_known_optimum_on_a_star():
    """A star on K nodes: MH puts 1/K on every edge (gap 1/K). No chain does better than gap 1/(K - 1): the hub's
    K - 1 edge weights sum to at most 1, and W has an eigenvalue at least 1 - (their mean) on vectors that sum
    to zero over the leaves; equal weights 1/(K - 1) reach it."""
    K = 6
    A = np.zeros((K, K), dtype=int)
    A[0, 1:] = A[1:, 0] = 1
    assert G.spectral_gap(G.metropolis_hastings(A)) == pytest.approx(1 / K)
    assert G.spectral_gap(G.fastest_mixing(A)) == pytest.approx(1 / (K - 1), abs=0.005)


def test_time_varying_graphs_are_reproducible():
    W = G.erdos_renyi_sequence(8, 0.5, random_state=0)
    np.testing.assert_array_equal(W(3), W(3))
    assert not np.array_equal(W(3), W(4))
    G.check_mixing(W(7))


def test_check_mixing_refuses_weight_off_the_graph():
    with pytest.raises(ValueError, match="not neighbours"):
        G.check_mixing(np.full((3, 3), 1 / 3), G.adjacency(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]])))
    with pytest.raises(ValueError, match="symmetric"):
        G.check_mixing(np.array([[0.5, 0.5], [0.2, 0.8]]))


def test_one_client_mixes_with_nobody():
    for W in (G.fastest_mixing(G.complete(1)), G.metropolis_hastings(G.complete(1))):
        np.testing.assert_array_equal(W, [[1.0]])
        assert G.spectral_gap(W) == 1.0
