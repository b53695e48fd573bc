"""Numba kernels: one fused, parallel pass over the samples per round.

Same functions, arguments and results as :mod:`fedmm.kernels._numpy`, the
oracle they are tested against. The contiguous sample array is cut into
pieces of at most ``PIECE`` samples that never cross a client boundary;
``prange`` runs over the pieces, each accumulating its own sums (so threads
never share an accumulator), which are then added up per client. Per sample
the kernel computes the component log-densities, the log-sum-exp and the
responsibilities, and accumulates what the family's M-step or gradient needs,
without ever storing the (n, R) responsibility matrix. ``X`` may be float32
or float64; arithmetic and sums are in float64. Compiled on first use and
cached on disk (``cache=True``), so importing fedmm compiles nothing.
"""

from functools import lru_cache

import numpy as np
from numba import njit, prange

from ._numpy import LOG_2PI, gaussian_stats, is_full, precision_cholesky, regression_stats  # noqa: F401

PIECE = 4096
# Reassociation lets LLVM vectorize the sums over coordinates; the no-NaN / no-inf
# assumptions of full fastmath are left out, since a zero weight gives log w = -inf.
FAST = {"reassoc", "contract", "arcp", "nsz"}


def _pieces(offsets):
    """Start, end and client of every piece: client ranges cut into runs of at most PIECE samples.

    A fit calls the kernels every round with the same offsets, so the cut is cached.
    """
    return _cut(offsets.tobytes(), offsets.dtype.str)


@lru_cache(maxsize=32)
def _cut(key, dtype):
    offsets = np.frombuffer(key, dtype=dtype)
    starts, ends, owners = [], [], []
    for k, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
        cut = np.arange(a, b, PIECE, dtype=np.int64)
        starts.append(cut)
        ends.append(np.minimum(cut + PIECE, b))
        owners.append(np.full(len(cut), k, dtype=np.int64))
    return np.concatenate(starts), np.concatenate(ends).astype(np.int64), np.concatenate(owners)


#: How ``precision`` is laid out: one per component, one per coordinate, or a flattened ``P`` (full).
SPHERICAL, DIAGONAL, FULL = 0, 1, 2


def _gaussian_constants(weights, means, variances):
    """Per client and component: ``log w - (d log 2 pi + log det Sigma) / 2``, the precisions and their
    layout: (K, R, 1) or (K, R, d) inverse variances, or (K, R, d * d) the upper-triangular ``P`` with
    ``Sigma^{-1} = P P^T`` (:func:`fedmm.kernels._numpy.precision_cholesky`)."""
    K, R, d = means.shape
    with np.errstate(divide="ignore"):
        log_w = np.log(weights)
    if is_full(variances, d):
        P = precision_cholesky(variances.reshape(K, R, d, d))
        log_det = -2.0 * np.log(np.diagonal(P, axis1=-2, axis2=-1)).sum(axis=-1)
        return log_w - 0.5 * (d * LOG_2PI + log_det), np.ascontiguousarray(P.reshape(K, R, d * d)), FULL
    precision = np.ascontiguousarray(1.0 / variances, dtype=np.float64)
    log_det = np.log(variances).sum(axis=-1) * (d / variances.shape[-1])
    return log_w - 0.5 * (d * LOG_2PI + log_det), precision, DIAGONAL if variances.shape[-1] > 1 else SPHERICAL


@njit(cache=True, inline="always")
def _normalize(lp, R):
    """In place: lp <- posterior; returns log sum exp (max-shifted, as the reference).

    The exponentials are most of a round's cost; the largest term is exp(0) = 1 and is not computed.
    """
    best = 0
    for r in range(1, R):
        if lp[r] > lp[best]:
            best = r
    top = lp[best]
    total = 1.0
    for r in range(R):
        if r != best:
            lp[r] = np.exp(lp[r] - top)
            total += lp[r]
    lp[best] = 1.0
    scale = 1.0 / total
    for r in range(R):
        lp[r] *= scale
    return top + np.log(total)


@njit(cache=True, inline="always", fastmath=FAST)
def _gaussian_row(X, i, k, const, means, precision, layout, lp, diff):
    """Component log-densities of sample i (direct (x - mu)^2, exact for large entries); ``diff`` is
    scratch space of length d."""
    R, d = means.shape[1], means.shape[2]
    for r in range(R):
        acc = 0.0
        if layout == 2:  # FULL: ||(x - mu) P||^2, P upper triangular (P[m, j] = 0 for m > j)
            for j in range(d):
                diff[j] = X[i, j] - means[k, r, j]
            for j in range(d):
                t = 0.0
                for m in range(j + 1):
                    t += diff[m] * precision[k, r, m * d + j]
                acc += t * t
        elif layout == 1:
            for j in range(d):
                delta = X[i, j] - means[k, r, j]
                acc += delta * delta * precision[k, r, j]
        else:
            for j in range(d):
                delta = X[i, j] - means[k, r, j]
                acc += delta * delta
            acc *= precision[k, r, 0]
        lp[r] = const[k, r] - 0.5 * acc


@njit(parallel=True, cache=True, fastmath=FAST)
def _gaussian_pass(X, starts, ends, owners, const, means, precision, layout, squares):
    """squares: 0 none, 1 per coordinate, 2 summed over coordinates, 3 outer products (upper triangle)."""
    n_pieces = len(starts)
    R, d = means.shape[1], means.shape[2]
    ll = np.zeros(n_pieces)
    N = np.zeros((n_pieces, R))
    Sx = np.zeros((n_pieces, R, d))
    Sxx = np.zeros((n_pieces, R, d if squares == 1 else d * d if squares == 3 else 1))
    for p in prange(n_pieces):
        k = owners[p]
        lp = np.empty(R)
        diff = np.empty(d)
        for i in range(starts[p], ends[p]):
            _gaussian_row(X, i, k, const, means, precision, layout, lp, diff)
            ll[p] += _normalize(lp, R)
            total = 0.0
            if squares == 2:
                for j in range(d):
                    total += X[i, j] * X[i, j]
            for r in range(R):
                g = lp[r]
                N[p, r] += g
                for j in range(d):
                    Sx[p, r, j] += g * X[i, j]
                if squares == 1:
                    for j in range(d):
                        Sxx[p, r, j] += g * X[i, j] * X[i, j]
                elif squares == 2:
                    Sxx[p, r, 0] += g * total
                elif squares == 3:
                    for j in range(d):
                        gx = g * X[i, j]
                        for m in range(j, d):
                            Sxx[p, r, j * d + m] += gx * X[i, m]
    return ll, N, Sx, Sxx


@njit(parallel=True, cache=True, fastmath=FAST)
def _regression_pass(X, y, starts, ends, owners, const, coef, inv_var):
    n_pieces = len(starts)
    R, p_dim = coef.shape[1], coef.shape[2]
    ll = np.zeros(n_pieces)
    N = np.zeros((n_pieces, R))
    A = np.zeros((n_pieces, R, p_dim, p_dim))
    b = np.zeros((n_pieces, R, p_dim))
    Syy = np.zeros((n_pieces, R))
    for p in prange(n_pieces):
        k = owners[p]
        lp = np.empty(R)
        for i in range(starts[p], ends[p]):
            yi = y[i]
            for r in range(R):
                fit = 0.0
                for j in range(p_dim):
                    fit += X[i, j] * coef[k, r, j]
                resid = yi - fit
                lp[r] = const[k, r] - 0.5 * resid * resid * inv_var[k, r]
            ll[p] += _normalize(lp, R)
            for r in range(R):
                g = lp[r]
                N[p, r] += g
                Syy[p, r] += g * yi * yi
                for j in range(p_dim):
                    gx = g * X[i, j]
                    b[p, r, j] += gx * yi
                    for m in range(j, p_dim):  # upper triangle; mirrored below
                        A[p, r, j, m] += gx * X[i, m]
    return ll, N, A, b, Syy


@njit(parallel=True, cache=True, fastmath=FAST)
def _gaussian_log_resp(X, starts, ends, owners, const, means, precision, layout, log_norm, log_resp):
    R, d = means.shape[1], means.shape[2]
    for p in prange(len(starts)):
        k = owners[p]
        lp = np.empty(R)
        diff = np.empty(d)
        for i in range(starts[p], ends[p]):
            _gaussian_row(X, i, k, const, means, precision, layout, lp, diff)
            _log_row(lp, R, log_norm, log_resp, i)


@njit(parallel=True, cache=True, fastmath=FAST)
def _regression_log_resp(X, y, starts, ends, owners, const, coef, inv_var, log_norm, log_resp):
    R, p_dim = coef.shape[1], coef.shape[2]
    for p in prange(len(starts)):
        k = owners[p]
        lp = np.empty(R)
        for i in range(starts[p], ends[p]):
            for r in range(R):
                fit = 0.0
                for j in range(p_dim):
                    fit += X[i, j] * coef[k, r, j]
                resid = y[i] - fit
                lp[r] = const[k, r] - 0.5 * resid * resid * inv_var[k, r]
            _log_row(lp, R, log_norm, log_resp, i)


@njit(cache=True, inline="always")
def _log_row(lp, R, log_norm, log_resp, i):
    top = lp[0]
    for r in range(1, R):
        if lp[r] > top:
            top = lp[r]
    total = 0.0
    for r in range(R):
        total += np.exp(lp[r] - top)
    log_sum = np.log(total)
    log_norm[i] = top + log_sum
    for r in range(R):
        log_resp[i, r] = lp[r] - top - log_sum


def _per_client(values, owners, K):
    """Add piece accumulators up per client: pieces of one client are consecutive and every client has
    one at least, so one ``reduceat`` over the first piece of each (``np.add.at``'s scatter was a third of
    an E-step's time with thousands of small clients; the sums are the same, in the same order)."""
    first = np.searchsorted(owners, np.arange(K))
    if len(owners) == 0 or owners[-1] != K - 1 or np.any(owners[first] != np.arange(K)):
        raise ValueError("every client needs at least one sample")
    return np.add.reduceat(values, first, axis=0)


def _regression_constants(weights, noise_var):
    var = noise_var[..., 0]
    with np.errstate(divide="ignore"):
        return np.log(weights) - 0.5 * (LOG_2PI + np.log(var)), 1.0 / var


_SQUARES = {"none": 0, "coordinates": 1, "total": 2, "outer": 3}


def _mirror(S, d):
    """Outer-product sums (K, R, d * d) accumulated on the upper triangle, made symmetric."""
    S = S.reshape(S.shape[:-1] + (d, d))
    return (np.triu(S) + np.swapaxes(np.triu(S, 1), -1, -2)).reshape(S.shape[:-2] + (d * d,))


def gaussian_estep(X, offsets, weights, means, variances, squares):
    """GMM E-step for all clients (see :func:`fedmm.kernels._numpy.gaussian_estep`)."""
    starts, ends, owners = _pieces(offsets)
    const, precision, layout = _gaussian_constants(weights, means, variances)
    ll, N, Sx, Sxx = _gaussian_pass(X, starts, ends, owners, const, np.ascontiguousarray(means, dtype=np.float64),
                                    precision, layout, _SQUARES[squares])
    K = len(offsets) - 1
    Sxx = None if squares == "none" else _per_client(Sxx, owners, K)
    if squares == "outer":
        Sxx = _mirror(Sxx, means.shape[-1])
    return _per_client(ll, owners, K), _per_client(N, owners, K), _per_client(Sx, owners, K), Sxx


def regression_estep(X, y, offsets, weights, coef, noise_var):
    """Mixture-of-regressions E-step for all clients (see :func:`fedmm.kernels._numpy.regression_estep`)."""
    starts, ends, owners = _pieces(offsets)
    const, inv_var = _regression_constants(weights, noise_var)
    ll, N, A, b, Syy = _regression_pass(X, y, starts, ends, owners, const,
                                        np.ascontiguousarray(coef, dtype=np.float64), inv_var)
    K = len(offsets) - 1
    A = _per_client(A, owners, K)
    A = np.triu(A) + np.swapaxes(np.triu(A, 1), -1, -2)
    return _per_client(ll, owners, K), _per_client(N, owners, K), A, _per_client(b, owners, K), \
        _per_client(Syy, owners, K)


def gaussian_log_resp(X, offsets, weights, means, variances):
    """Per-sample ``log p(x_i)`` and log posteriors (see :func:`fedmm.kernels._numpy.gaussian_log_resp`)."""
    starts, ends, owners = _pieces(offsets)
    const, precision, layout = _gaussian_constants(weights, means, variances)
    log_norm, log_resp = np.empty(len(X)), np.empty((len(X), weights.shape[1]))
    _gaussian_log_resp(X, starts, ends, owners, const, np.ascontiguousarray(means, dtype=np.float64), precision,
                       layout, log_norm, log_resp)
    return log_norm, log_resp


def regression_log_resp(X, y, offsets, weights, coef, noise_var):
    """Per-sample ``log p(y_i | x_i)`` and log posteriors (see :func:`fedmm.kernels._numpy.regression_log_resp`)."""
    starts, ends, owners = _pieces(offsets)
    const, inv_var = _regression_constants(weights, noise_var)
    log_norm, log_resp = np.empty(len(X)), np.empty((len(X), weights.shape[1]))
    _regression_log_resp(X, y, starts, ends, owners, const, np.ascontiguousarray(coef, dtype=np.float64), inv_var,
                         log_norm, log_resp)
    return log_norm, log_resp
