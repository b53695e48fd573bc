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

With weights (a row counts as so many copies of it), the same code is the server's k-FED clustering of
the clients' own centres (:meth:`fedmm.families.GaussianFamily.combine_starts`): the best of several
runs, all in one compiled call (:func:`kmeans_runs`), fewer of them on many points (:func:`n_runs`).
"""

import numpy as np
from numba import njit, prange

from .threads import parallel_kernel

__all__ = ["n_trials", "n_uniforms", "seeding_uniforms", "kmeans_labels", "best_kmeans_labels", "kmeans_plus_plus",
           "lloyd_labels", "kmeans_labels_clients", "kmeans_runs", "n_runs"]

MAX_ITER = 300
TOL = 1e-4
TINY = np.finfo(np.float64).tiny
#: k-means runs :func:`best_kmeans_labels` keeps the best of (scikit-learn's ``KMeans`` default before 1.4).
N_INIT = 10
#: Points times runs :func:`best_kmeans_labels` spends at most: past ``RESTART_POINTS / N_INIT`` points, fewer runs.
RESTART_POINTS = 500_000


def n_trials(n_components):
    """Candidates per centre in greedy k-means++: ``2 + floor(log R)`` (scikit-learn's choice)."""
    return 2 + int(np.log(n_components))


def n_uniforms(n_components):
    """How many uniforms one client's seeding uses: one for the first centre, ``n_trials`` per later one."""
    return 1 + (n_components - 1) * n_trials(n_components)


def seeding_uniforms(seeds, n_components):
    """The uniforms each client seeds with: ``RandomState(seed)``'s first ones, one row per seed.

    Computed in one compiled call (:func:`_mt19937_uniforms`): numpy's own generator, reseeded per client,
    cost 7 us a client (1.4 s at 10^5 clients), where constructing one per client had cost 0.14 ms.
    """
    seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
    if seeds.size and (seeds.min() < 0 or seeds.max() > 2 ** 32 - 1):
        raise ValueError("Seed must be between 0 and 2**32 - 1")
    return _mt19937_uniforms(seeds.astype(np.uint32), n_uniforms(n_components))


# MT19937 (Matsumoto & Nishimura 1998) as numpy's ``RandomState`` runs it: an integer seed fills the state by
# ``init_genrand`` (numpy's ``mt19937_seed``), and a uniform is ``(a >> 5, b >> 6)`` of two tempered words as
# 53 bits (``mt19937_next_double``).
_N, _M = 624, 397


@njit(cache=True)
def _mt19937_uniforms(seeds, count):
    """``RandomState(seed).random_sample(count)`` for every seed: (len(seeds), count)."""
    out = np.empty((seeds.shape[0], count))
    key = np.empty(_N, dtype=np.uint32)
    for row in range(seeds.shape[0]):
        key[0] = seeds[row]
        for i in range(1, _N):
            key[i] = np.uint32(1812433253) * (key[i - 1] ^ (key[i - 1] >> np.uint32(30))) + np.uint32(i)
        pos = _N
        for j in range(count):
            a, pos = _word(key, pos)
            b, pos = _word(key, pos)
            out[row, j] = ((a >> np.uint32(5)) * 67108864.0 + (b >> np.uint32(6))) / 9007199254740992.0
    return out


@njit(cache=True)
def _word(key, pos):
    """The tempered word at ``pos`` (after a twist where the state is used up), and the next position."""
    if pos == _N:
        _twist(key)
        pos = 0
    return _temper(key[pos]), pos + 1


@njit(cache=True)
def _twist(key):
    """The next 624 words of the state, in place (numpy's ``mt19937_gen``)."""
    for i in range(_N):
        y = (key[i] & np.uint32(0x80000000)) | (key[(i + 1) % _N] & np.uint32(0x7fffffff))
        key[i] = key[(i + _M) % _N] ^ (y >> np.uint32(1)) ^ (np.uint32(0x9908b0df) * (y & np.uint32(1)))


@njit(cache=True)
def _temper(y):
    """MT19937's tempering of a state word."""
    y ^= y >> np.uint32(11)
    y ^= (y << np.uint32(7)) & np.uint32(0x9d2c5680)
    y ^= (y << np.uint32(15)) & np.uint32(0xefc60000)
    return y ^ (y >> np.uint32(18))


def kmeans_labels(X, n_components, uniforms, max_iter=MAX_ITER, sample_weight=None):
    """One client's k-means labels (n,): the numpy reference of :func:`kmeans_labels_clients`.

    With ``sample_weight``, weighted k-means (each row counts its weight; scikit-learn's ``KMeans``
    with ``sample_weight``): the server's clustering of the clients' own centres, each weighted by
    the samples it stands for (:func:`fedmm.initialization.clustered_start`).
    """
    return lloyd_labels(X, kmeans_plus_plus(X, n_components, uniforms, sample_weight), max_iter, sample_weight)


def best_kmeans_labels(X, n_components, random_state, sample_weight=None, n_init=N_INIT):
    """The labels (n,) of the best of :func:`n_runs` weighted k-means runs (:func:`kmeans_runs`): the lowest
    weighted inertia ``sum_i w_i ||x_i - c_{label_i}||^2``, the first of equals. Run ``i`` seeds with the
    ``i``-th ``n_uniforms(n_components)`` of the ``n_init`` rows of uniforms ``random_state`` draws (all
    drawn, so that what ``random_state`` gives next does not depend on the runs made)."""
    uniforms = random_state.random_sample((n_init, n_uniforms(n_components)))
    labels, inertia = kmeans_runs(X, n_components, uniforms[:n_runs(len(X), n_init)], sample_weight)
    return labels[np.argmin(inertia)]


def n_runs(n_points, n_init=N_INIT):
    """How many of ``n_init`` k-means runs :func:`best_kmeans_labels` makes on ``n_points`` points: all of them
    up to ``RESTART_POINTS / n_init`` points, then fewer, at least one (``RESTART_POINTS // n_points``).

    Restarts guard against a poor local optimum, which many points make rare: on the k-FED clustering of
    10^4 and 10^5 clients' centres (25,000 and 250,000 points, ``validation/bench_scale.py``'s design) all
    ten runs ended within 1.5e-7 of the lowest inertia, with 99.998% of the weight in the same clusters,
    while on 250 points (100 clients) they differed by up to 147% (issue 60). scikit-learn's ``KMeans``
    runs k-means++ once by default since 1.4 (``n_init="auto"``)."""
    return int(max(1, min(n_init, RESTART_POINTS // max(n_points, 1))))


def kmeans_runs(X, n_components, uniforms, sample_weight=None, max_iter=MAX_ITER):
    """Weighted k-means of ``X`` once per row of ``uniforms``, in one compiled call: each run's labels
    (n_runs, n), the labels :func:`kmeans_labels` gives with that row, and its weighted inertia (n_runs,)
    at the weighted means of its clusters.

    This is the server's clustering of the clients' own centres (k-FED,
    :meth:`fedmm.families.GaussianFamily.combine_starts`): about ``K R / 2`` points, where the numpy
    reference took 0.8 s per best of ten runs at ``K = 10^4`` (issue 60).
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    w = np.ones(len(X)) if sample_weight is None else np.ascontiguousarray(sample_weight, dtype=np.float64)
    uniforms = np.ascontiguousarray(uniforms, dtype=np.float64)
    # Work as :func:`kmeans_labels_clients` counts it, for every run.
    work = X.shape[0] * X.shape[1] * int(n_components) * n_trials(n_components) * len(uniforms)
    return _kmeans_runs(work, len(uniforms), X, w, int(n_components), uniforms, n_trials(n_components),
                        int(max_iter))


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
        _kmeans_one(X[lo:hi], np.ones(hi - lo), R, uniforms[k], T, max_iter, labels[lo:hi])
    return labels


@parallel_kernel()
def _kmeans_runs(X, w, R, uniforms, T, max_iter):
    labels = np.full((uniforms.shape[0], X.shape[0]), -1, dtype=np.int64)
    inertia = np.empty(uniforms.shape[0])
    for run in prange(uniforms.shape[0]):
        _kmeans_one(X, w, R, uniforms[run], T, max_iter, labels[run])
        inertia[run] = _inertia(X, w, R, labels[run])
    return labels, inertia


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
def _kmeans_one(X, w, R, u, T, max_iter, labels):
    """One k-means run of rows ``X`` with weights ``w``, its labels written into ``labels`` (all -1 on entry)."""
    centers = _seed(X, w, R, u, T)
    _lloyd(X, w, centers, max_iter, labels)


@njit(cache=True)
def _seed(X, w, R, u, T):
    """Greedy k-means++ centres (R, d): :func:`kmeans_plus_plus` as loops."""
    n, d = X.shape
    centers = np.empty((R, d))
    cumulative = np.empty(n)
    total = 0.0
    for i in range(n):
        total += w[i]
        cumulative[i] = total
    _set_row(centers, 0, X[min(_first_above(cumulative, u[0] * total), n - 1)])
    closest = np.empty(n)
    for i in range(n):
        closest[i] = w[i] * _sq_distance(X[i], centers[0])
    trial = np.empty(n)
    best_d = np.empty(n)
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
                trial[m] = min(closest[m], w[m] * _sq_distance(X[m], X[i]))
            for m in range(n):
                pot += trial[m]
            if pot < best_pot:
                best, best_pot = i, pot
                best_d, trial = trial, best_d
        _set_row(centers, c, X[best])
        closest, best_d = best_d, closest
    return centers


@njit(cache=True)
def _lloyd(X, w, centers, max_iter, labels):
    """Lloyd's iterations from ``centers`` (updated in place): :func:`lloyd_labels` as loops."""
    n, d = X.shape
    R = centers.shape[0]
    tol = TOL * _mean_variance(X, w)
    settled = False
    for _ in range(max_iter):
        changed = False
        for i in range(n):
            arg = _nearest(X[i], centers)
            if arg != labels[i]:
                labels[i] = arg
                changed = True
        if not changed or settled:
            break
        sums, mass = _cluster_sums(X, w, R, labels)
        shift = 0.0
        for r in range(R):
            if mass[r] > 0:
                for j in range(d):
                    new = sums[r, j] / mass[r]
                    shift += (new - centers[r, j]) ** 2
                    centers[r, j] = new
        settled = shift <= tol


@njit(cache=True)
def _nearest(x, centers):
    """The first of the centres nearest to ``x``."""
    arg, low = 0, np.inf
    for r in range(centers.shape[0]):
        dist = _sq_distance(x, centers[r])
        if dist < low:
            arg, low = r, dist
    return arg


@njit(cache=True)
def _cluster_sums(X, w, R, labels):
    """Each cluster's weighted sum of rows (R, d) and its weight (R,)."""
    sums = np.zeros((R, X.shape[1]))
    mass = np.zeros(R)
    for i in range(X.shape[0]):
        mass[labels[i]] += w[i]
        for j in range(X.shape[1]):
            sums[labels[i], j] += w[i] * X[i, j]
    return sums, mass


@njit(cache=True)
def _inertia(X, w, R, labels):
    """``sum_i w_i ||x_i - c_{label_i}||^2`` at the clusters' weighted means (as :func:`best_kmeans_labels`'s
    numpy form had it: a cluster without weight has its centre at 0 and no members)."""
    sums, mass = _cluster_sums(X, w, R, labels)
    for r in range(R):
        for j in range(X.shape[1]):
            sums[r, j] /= max(mass[r], TINY)
    total = 0.0
    for i in range(X.shape[0]):
        total += w[i] * _sq_distance(X[i], sums[labels[i]])
    return total


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
def _mean_variance(X, w):
    """The weighted mean of the coordinates' weighted variances (the tolerance's scale)."""
    n, d = X.shape
    W = 0.0
    for i in range(n):
        W += w[i]
    total = 0.0
    for j in range(d):
        mean = 0.0
        for i in range(n):
            mean += w[i] * X[i, j]
        mean /= W
        for i in range(n):
            total += w[i] * (X[i, j] - mean) ** 2
    return total / (W * d)
