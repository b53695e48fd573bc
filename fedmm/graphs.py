"""Communication graphs and mixing matrices for decentralized methods (FedEM App. D.2, Assumption 9).

A decentralized method has no server: each round, client ``k`` replaces its
messages by the average ``sum_j W_kj m_j`` over its neighbours, for a
*mixing matrix* ``W`` supported on the graph. FedEM's analysis of D-FedEM
(Assumption 9) asks for symmetric doubly stochastic ``W`` whose products
contract the clients' disagreement; for one fixed ``W`` that is a spectral
gap ``1 - max(|lambda_2|, |lambda_K|) > 0``, which needs a connected graph.

Graphs are symmetric 0/1 adjacency matrices without self-loops. Mixing
matrices:

- :func:`metropolis_hastings`: ``W_kj = 1 / (1 + max(d_k, d_j))`` on edges, the
  rest on the diagonal; local (each client needs only its neighbours' degrees);
- :func:`fastest_mixing`: the fastest-mixing chain on the graph (Boyd, Diaconis
  & Xiao, SIAM Review 2004, cited by the FedEM paper for its D-FedEM
  experiments): the symmetric stochastic ``W`` on the graph with the smallest
  second-largest eigenvalue modulus, by their projected subgradient method
  (Sec. 5), started at Metropolis-Hastings and keeping the best iterate, so
  it never mixes slower than Metropolis-Hastings.

A time-varying graph is any callable ``t -> W`` of checked mixing matrices,
e.g. :func:`erdos_renyi_sequence`.
"""

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["complete", "ring", "torus", "erdos_renyi", "connected_erdos_renyi", "k_regular", "adjacency", "check_connected",
           "metropolis_hastings", "fastest_mixing", "spectral_gap", "n_directed_edges", "check_mixing",
           "erdos_renyi_sequence"]


def adjacency(A):
    """A user's adjacency matrix, checked: square, symmetric, 0/1 (or boolean), connected; diagonal ignored."""
    A = np.asarray(A)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 1:
        raise ValueError(f"An adjacency matrix must be square (K, K); got shape {A.shape}.")
    if not np.isin(A, (0, 1)).all():
        raise ValueError("An adjacency matrix holds 0 (no edge) and 1 (edge) only.")
    A = A.astype(bool)
    np.fill_diagonal(A, False)
    if not (A == A.T).all():
        raise ValueError("The adjacency matrix must be symmetric: communication goes both ways.")
    check_connected(A)
    return A


def complete(K):
    """Every client talks to every other."""
    return adjacency(1 - np.eye(K, dtype=int))


def ring(K):
    """Client ``k`` talks to ``k - 1`` and ``k + 1`` (mod ``K``)."""
    return k_regular(K, 2 if K > 2 else K - 1)


def torus(rows, cols):
    """A ``rows x cols`` grid with wrap-around: client ``(i, j)`` talks to its four grid neighbours."""
    if rows < 1 or cols < 1:
        raise ValueError(f"A torus needs rows, cols >= 1; got {rows} x {cols}.")
    K = rows * cols
    A = np.zeros((K, K), dtype=int)
    for i in range(rows):
        for j in range(cols):
            k = i * cols + j
            for di, dj in ((1, 0), (0, 1)):
                m = ((i + di) % rows) * cols + (j + dj) % cols
                if m != k:
                    A[k, m] = A[m, k] = 1
    return adjacency(A)


def k_regular(K, k):
    """The circulant ``k``-regular graph: each client talks to its ``k // 2`` nearest on either side of a
    ring, and for odd ``k`` (``K`` even) to the opposite client."""
    if not 0 < k < K or (k % 2 and K % 2):
        raise ValueError(f"A {k}-regular graph on {K} clients needs 0 < k < K and k * K even.")
    A = np.zeros((K, K), dtype=int)
    for k_ in range(K):
        for s in range(1, k // 2 + 1):
            A[k_, (k_ + s) % K] = A[(k_ + s) % K, k_] = 1
        if k % 2:
            A[k_, (k_ + K // 2) % K] = 1
    return adjacency(A)


def erdos_renyi(K, p, random_state=None):
    """A binomial Erdos-Renyi graph: each pair talks with probability ``p`` (the FedEM paper: ``p = 0.5``).

    Raises ``ValueError`` when the draw is not connected (raise ``p`` or draw with another seed).
    """
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1]; got {p}.")
    rng = check_random_state(random_state)
    upper = np.triu(rng.uniform(size=(K, K)) < p, 1)
    return adjacency((upper | upper.T).astype(int))


def connected_erdos_renyi(K, p, random_state=None, tries=1000):
    """An Erdos-Renyi(K, p) graph conditioned on being connected: draws until one is."""
    rng = check_random_state(random_state)
    for _ in range(tries):
        try:
            return erdos_renyi(K, p, rng)
        except ValueError:
            continue
    raise ValueError(f"No connected Erdos-Renyi({K}, {p}) graph in {tries} draws; raise p.")


def erdos_renyi_sequence(K, p, random_state=None, weights="metropolis-hastings"):
    """A time-varying graph: round ``t`` draws its own connected Erdos-Renyi graph and its mixing
    matrix; ``t -> W``, the same ``W`` for the same ``t``."""
    seed = check_random_state(random_state).randint(2 ** 31 - 1)
    mix = {"metropolis-hastings": metropolis_hastings, "fastest": fastest_mixing}[weights]
    return lambda t: mix(connected_erdos_renyi(K, p, (seed + t) % (2 ** 31 - 1)))


def check_connected(A):
    """Raise ``ValueError`` naming the unreachable clients when the graph is not connected."""
    A = np.asarray(A, dtype=bool)
    seen = np.zeros(len(A), dtype=bool)
    seen[0] = True
    frontier = seen.copy()
    while frontier.any():
        frontier = A[frontier].any(axis=0) & ~seen
        seen |= frontier
    if not seen.all():
        raise ValueError(f"The communication graph is not connected: client(s) {np.flatnonzero(~seen)[:10].tolist()} "
                         "cannot reach client 0, so no mixing reaches consensus; add edges.")


def metropolis_hastings(A):
    """``W_kj = 1 / (1 + max(d_k, d_j))`` for neighbours, ``W_kk = 1 - sum_j W_kj``: symmetric, doubly stochastic."""
    A = adjacency(A)
    d = A.sum(axis=1)
    W = np.where(A, 1.0 / (1.0 + np.maximum(d[:, None], d[None, :])), 0.0)
    W[np.diag_indices_from(W)] = 1.0 - W.sum(axis=1)
    return check_mixing(W, A)


def slem(W):
    """Second-largest eigenvalue modulus ``max(|lambda_2|, |lambda_K|)`` of a symmetric stochastic ``W``."""
    lam = np.linalg.eigvalsh(W)
    return 0.0 if len(lam) == 1 else max(abs(lam[0]), abs(lam[-2]))


def n_directed_edges(W):
    """Messages one exchange over the mixing matrix ``W`` sends: its off-diagonal non-zeros."""
    return int(np.count_nonzero(W) - np.count_nonzero(np.diag(W)))


def spectral_gap(W):
    """``1 - max(|lambda_2|, |lambda_K|)``: the fraction of disagreement one mixing step removes (at least)."""
    return 1.0 - slem(W)


def check_mixing(W, A=None, atol=1e-10):
    """Check ``W`` is a symmetric doubly stochastic matrix with non-negative entries on the graph ``A``
    (and the diagonal); return it."""
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"A mixing matrix must be square; got shape {W.shape}.")
    if not np.allclose(W, W.T, atol=atol) or (W < -atol).any() or not np.allclose(W.sum(axis=1), 1.0, atol=atol):
        raise ValueError("A mixing matrix must be symmetric with non-negative entries and rows summing to 1.")
    if A is not None:
        off = ~(np.asarray(A, dtype=bool) | np.eye(len(W), dtype=bool))
        if (np.abs(W[off]) > atol).any():
            raise ValueError("The mixing matrix puts weight on pairs that are not neighbours in the graph.")
    return W


def fastest_mixing(A, max_iter=300, step=0.5):
    """The fastest-mixing symmetric stochastic matrix on ``A`` (Boyd, Diaconis & Xiao 2004, Sec. 5).

    Edge weights ``w`` give ``W(w) = I - sum_{edges (i, j)} w_ij (e_i - e_j)(e_i - e_j)^T``. A
    subgradient of the second-largest eigenvalue modulus at ``w`` is ``-(u_i - u_j)^2`` when it is
    ``lambda_2`` (``u`` its unit eigenvector) and ``+(u_i - u_j)^2`` when it is ``-lambda_K``. Steps
    ``step / sqrt(k)`` along the normalized subgradient, then back to feasibility (``w >= 0``, each
    client's weights summing to at most 1, by scaling each edge by the larger of its ends' excess).
    Starts at Metropolis-Hastings and returns the best iterate.
    """
    A = adjacency(A)
    i, j = np.nonzero(np.triu(A, 1))
    K = len(A)

    def matrix(w):
        W = np.zeros((K, K))
        W[i, j] = W[j, i] = w
        W[np.diag_indices(K)] = 1.0 - W.sum(axis=1)
        return W

    if not len(i):  # one client: nothing to mix
        return np.eye(K)
    best = w = metropolis_hastings(A)[i, j]
    best_slem = slem(matrix(w))
    for k in range(1, max_iter + 1):
        lam, vec = np.linalg.eigh(matrix(w))
        top = -1 if abs(lam[0]) > abs(lam[-2]) else 1            # which end sets the modulus
        u = vec[:, 0] if top == -1 else vec[:, -2]
        g = top * -(u[i] - u[j]) ** 2
        norm = np.linalg.norm(g)
        if norm == 0:
            break
        w = np.maximum(w - step / np.sqrt(k) * g / norm, 0.0)
        load = np.bincount(i, w, K) + np.bincount(j, w, K)
        w = w / np.maximum(1.0, np.maximum(load[i], load[j]))
        s = slem(matrix(w))
        if s < best_slem:
            best, best_slem = w, s
    return check_mixing(matrix(best), A)
