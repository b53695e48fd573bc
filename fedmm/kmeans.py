"""k-means starts for every client at once: greedy k-means++ seeding, then Lloyd's iterations.

Each client's start is the family's start on its own rows (FedGrEM App. B and C.1 start local EM
from k-means). scikit-learn's ``KMeans`` does this well for one client but costs about 25 ms of
overhead per call, which made starts for thousands of small clients take minutes (issue 16). Here
every client's k-means runs in one compiled call over the contiguous array, each client on its
own rows with its own random numbers, so a client's result does not depend on the others'.

The algorithm is scikit-learn's (Arthur & Vassilvitskii 2007, with its greedy variant): the first
centre is a uniformly drawn row; each further centre is the best, by the resulting potential
``sum_i min_c ||x_i - c||^2``, of ``2 + floor(log R)`` rows drawn with probability proportional to
their squared distance to the nearest centre so far; then Lloyd's iterations until no label
changes or the centres move less than scikit-learn's tolerance (``sum_r ||c_r' - c_r||^2`` at most
``1e-4`` times the mean of the client's coordinate variances; the labels are then those of the last
centres), at most ``max_iter``. A centre that loses all its rows stays where it was. The random
numbers are uniforms drawn beforehand from the client's seed (:func:`seeding_uniforms`), so the
compiled loop and the numpy reference (:func:`kmeans_labels`, the oracle) make the same choices.
"""

import numpy as np
from numba import njit, prange

from .threads import parallel_kernel

__all__ = ["n_trials", "n_uniforms", "seeding_uniforms", "kmeans_labels", "best_kmeans_labels", "kmeans_plus_plus",
           "lloyd_labels", "kmeans_labels_clients"]

MAX_ITER = 300
TOL = 1e-4
#: k-means runs :func:`best_kmeans_labels` keeps the best of (scikit-learn's ``KMeans`` default before 1.4).
N_INIT = 10


def n_trials(n_components):
    """Candidates per centre in greedy k-means++: ``2 + floor(log R)`` (scikit-learn's choice)."""
    return 2 + int(np.log(n_components))


def n_uniforms(n_components):
    """How many uniforms one client's seeding uses: one for the first centre, ``n_trials`` per later one."""
    return 1 + (n_components - 1) * n_trials(n_components)


def seeding_uniforms(seeds, n_components):
    """The uniforms each client seeds with: ``RandomState(seed)``'s first ones, one row per seed
    (one generator reseeded per client: constructing one per client cost 0.14 ms each)."""
    rng = np.random.RandomState()
    out = np.empty((len(seeds), n_uniforms(n_components)))
    for row, seed in zip(out, seeds):
        rng.seed(seed)
        row[:] = rng.random_sample(len(row))
    return out


def kmeans_labels(X, n_components, uniforms, max_iter=MAX_ITER, sample_weight=None):
    """One client's k-means labels (n,): the numpy reference of :func:`kmeans_labels_clients`.

    With ``sample_weight``, weighted k-means (each row counts its weight; scikit-learn's ``KMeans``
    with ``sample_weight``): the server's clustering of the clients' own centres, each weighted by
    the samples it stands for (:func:`fedmm.initialization.clustered_start`).
    """
    return lloyd_labels(X, kmeans_plus_plus(X, n_components, uniforms, sample_weight), max_iter, sample_weight)


def best_kmeans_labels(X, n_components, random_state, sample_weight=None, n_init=N_INIT):
    """The labels (n,) of the best of ``n_init`` weighted k-means runs (:func:`kmeans_labels`): the lowest
    weighted inertia ``sum_i w_i ||x_i - c_{label_i}||^2``, the first of equals."""
    w = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    best, lowest = None, np.inf
    for _ in range(n_init):
        labels = kmeans_labels(X, n_components, random_state.random_sample(n_uniforms(n_components)),
                               sample_weight=w)
        member = np.eye(n_components)[labels] * w[:, None]                          # (n, R)
        centers = member.T @ X / np.maximum(member.sum(axis=0), np.finfo(float).tiny)[:, None]
        inertia = w @ ((X - centers[labels]) ** 2).sum(axis=1)
        if inertia < lowest:
            best, lowest = labels, inertia
    return best


def kmeans_plus_plus(X, n_components, uniforms, sample_weight=None):
    """Greedy k-means++ centres (R, d) of one client's rows, choices made by ``uniforms``; a row is drawn
    with probability proportional to its weight times its squared distance to the nearest centre."""
    n = len(X)
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    T = n_trials(n_components)
    centers = np.empty((n_components, X.shape[1]))
    centers[0] = X[min(int(np.searchsorted(np.cumsum(w), uniforms[0] * w.sum(), side="right")), n - 1)]
    closest = w * ((X - centers[0]) ** 2).sum(axis=1)
    for c in range(1, n_components):
        best, best_pot, best_d = -1, np.inf, None
        cumulative = np.cumsum(closest)
        for t in range(T):
            target = uniforms[1 + (c - 1) * T + t] * cumulative[-1]
            i = min(int(np.searchsorted(cumulative, target, side="right")), n - 1)
            d = np.minimum(closest, w * ((X - X[i]) ** 2).sum(axis=1))
            pot = d.sum()
            if pot < best_pot:
                best, best_pot, best_d = i, pot, d
        centers[c] = X[best]
        closest = best_d
    return centers


def lloyd_labels(X, centers, max_iter=MAX_ITER, sample_weight=None):
    """Lloyd's iterations from ``centers`` with scikit-learn's stopping rule; the final labels (n,).
    With weights, centres are their rows' weighted means and the tolerance's variance is weighted too, so that
    a weight counts as so many copies of the row."""
    centers = np.array(centers, dtype=float)
    w = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    labels, settled = np.full(len(X), -1), False
    mean = w @ X / w.sum()
    tol = TOL * (w @ (X - mean) ** 2 / w.sum()).mean()
    for _ in range(max_iter):
        distance = ((X[:, None, :] - centers[None]) ** 2).sum(axis=2)
        new = distance.argmin(axis=1)
        if np.array_equal(new, labels) or settled:
            return new
        labels, previous = new, centers.copy()
        for r in range(len(centers)):
            mine = labels == r
            if w[mine].sum() > 0:
                centers[r] = w[mine] @ X[mine] / w[mine].sum()
        settled = ((centers - previous) ** 2).sum() <= tol
    return labels


def kmeans_labels_clients(X, offsets, n_components, uniforms, max_iter=MAX_ITER):
    """Every client's k-means labels over the contiguous ``X`` (client ``k``: rows
    ``offsets[k]:offsets[k+1]``, uniforms ``uniforms[k]``), in one compiled call: (n,) int."""
    # Work: the seeding's distances from every sample to every trial centre, at least (the Lloyd
    # iterations that follow add as many per iteration).
    work = X.shape[0] * X.shape[1] * int(n_components) * n_trials(n_components)
    return _kmeans_clients(work, len(offsets) - 1, np.ascontiguousarray(X, dtype=np.float64),
                           np.asarray(offsets, dtype=np.int64), int(n_components),
                           np.ascontiguousarray(uniforms, dtype=np.float64), n_trials(n_components), int(max_iter))


@parallel_kernel()
def _kmeans_clients(X, offsets, R, uniforms, T, max_iter):
    labels = np.full(X.shape[0], -1, dtype=np.int64)
    for k in prange(offsets.shape[0] - 1):
        lo, hi = offsets[k], offsets[k + 1]
        _kmeans_one(X[lo:hi], R, uniforms[k], T, max_iter, labels[lo:hi])
    return labels


@njit(cache=True)
def _sq_distance(x, c):
    s = 0.0
    for j in range(x.shape[0]):
        s += (x[j] - c[j]) ** 2
    return s


@njit(cache=True)
def _set_row(A, r, x):
    """``A[r] = x``, as a loop: Numba's checked slice assignment takes seconds to compile."""
    for j in range(x.shape[0]):
        A[r, j] = x[j]


@njit(cache=True)
def _kmeans_one(X, R, u, T, max_iter, labels):
    """One client's k-means labels, written into ``labels`` (all -1 on entry)."""
    n, d = X.shape
    centers = np.empty((R, d))
    _set_row(centers, 0, X[min(int(u[0] * n), n - 1)])
    closest = np.empty(n)
    for i in range(n):
        closest[i] = _sq_distance(X[i], centers[0])
    trial = np.empty(n)
    best_d = np.empty(n)
    cumulative = np.empty(n)
    for c in range(1, R):
        total = 0.0
        for i in range(n):
            total += closest[i]
            cumulative[i] = total
        best, best_pot = -1, np.inf
        for t in range(T):
            target = u[1 + (c - 1) * T + t] * cumulative[n - 1]
            i = min(_first_above(cumulative, target), n - 1)
            pot = 0.0
            for m in range(n):
                trial[m] = min(closest[m], _sq_distance(X[m], X[i]))
            for m in range(n):
                pot += trial[m]
            if pot < best_pot:
                best, best_pot = i, pot
                best_d, trial = trial, best_d
        _set_row(centers, c, X[best])
        closest, best_d = best_d, closest
    counts = np.zeros(R)
    tol = TOL * _mean_variance(X)
    settled = False
    for _ in range(max_iter):
        changed = False
        for i in range(n):
            arg, low = 0, np.inf
            for r in range(R):
                dist = _sq_distance(X[i], centers[r])
                if dist < low:
                    arg, low = r, dist
            if arg != labels[i]:
                labels[i] = arg
                changed = True
        if not changed or settled:
            break
        sums = np.zeros((R, d))
        counts[:] = 0.0
        for i in range(n):
            counts[labels[i]] += 1.0
            for j in range(d):
                sums[labels[i], j] += X[i, j]
        shift = 0.0
        for r in range(R):
            if counts[r] > 0:
                for j in range(d):
                    new = sums[r, j] / counts[r]
                    shift += (new - centers[r, j]) ** 2
                    centers[r, j] = new
        settled = shift <= tol


@njit(cache=True)
def _first_above(a, value):
    """``np.searchsorted(a, value, side="right")`` for a non-decreasing ``a``, as a loop that compiles
    in a tenth of the time."""
    lo, hi = 0, a.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] <= value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _mean_variance(X):
    n, d = X.shape
    total = 0.0
    for j in range(d):
        mean = 0.0
        for i in range(n):
            mean += X[i, j]
        mean /= n
        for i in range(n):
            total += (X[i, j] - mean) ** 2
    return total / (n * d)
