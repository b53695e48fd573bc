"""Numba kernels: one fused, parallel pass over the samples per round.

Same functions, arguments and results as :mod:`fedmm.kernels._numpy`, the
oracle they are tested against. The contiguous sample array is cut into
pieces of at most ``PIECE`` samples that never cross a client boundary;
``prange`` runs over the pieces (on one thread for small passes:
:func:`fedmm.threads.parallel_kernel`), each accumulating its own sums (so
threads never share an accumulator), which are then added up per client. A piece is
walked in blocks of ``BLOCK`` samples, copied transposed so that samples are
the vector lanes: per block the kernel computes the component log-densities,
the log-sum-exp (with an exponential LLVM vectorizes, :func:`_exp_block`) and
the responsibilities, and accumulates what the family's M-step or gradient
needs as dot products over the block, never storing the (n, R)
responsibility matrix. ``X`` may be float32
or float64; arithmetic and sums are in float64. Compiled on first use and
cached on disk (``cache=True``), so importing fedmm compiles nothing.
"""

from functools import lru_cache

import numpy as np
from numba import njit, prange

from ..threads import parallel_kernel

from ._numpy import LOG_2PI, is_full, precision_cholesky, regression_stats  # noqa: F401

PIECE = 4096
#: Samples per vectorized block inside a piece: their scratch rows (d + R of them) stay in L1/L2.
BLOCK = 128
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
    offsets = np.frombuffer(key, dtype=dtype).astype(np.int64)
    cuts = -(-np.diff(offsets) // PIECE)  # pieces per client, none for an empty one
    owners = np.repeat(np.arange(len(cuts), dtype=np.int64), cuts)
    first = np.cumsum(cuts) - cuts  # each client's first piece
    starts = offsets[owners] + (np.arange(len(owners), dtype=np.int64) - first[owners]) * PIECE
    return starts, np.minimum(starts + PIECE, offsets[owners + 1]), owners


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
    log_det = np.einsum("krs->kr", np.log(variances)) * (d / variances.shape[-1])  # einsum: a short axis
    return log_w - 0.5 * (d * LOG_2PI + log_det), precision, DIAGONAL if variances.shape[-1] > 1 else SPHERICAL


# exp(x) = 2^n exp(x - n ln 2) with |x - n ln 2| <= ln(2) / 2, where the Taylor polynomial of degree 12
# is exact to 2e-16 relative; ln 2 is split in two (Cody & Waite, fdlibm's constants) so that x - n ln 2
# is exact to the last bit for every n; 2^n is built from its bits as 2^(n // 2) 2^(n - n // 2), so that
# results below the smallest normal number underflow gradually as np.exp's do, and below exp(-750) are 0.
LOG2E, LN2_HI, LN2_LO = 1.4426950408889634, 6.93147180369123816490e-01, 1.90821492927058770002e-10
E2, E3, E4, E5, E6, E7, E8, E9, E10, E11, E12 = (1.0 / float(np.prod(np.arange(1.0, m + 1))) for m in range(2, 13))


# Fused multiply-adds only: reassociation would fold the two halves of ln 2 back into one.
@njit(cache=True, fastmath={"contract"})
def _exp_block(z, nb, bits):
    """In place ``z[:nb] <- exp(z[:nb])`` for ``z <= 0``, in loops LLVM vectorizes (no library calls).

    ``bits`` is int64 scratch of length ``2 * nb``, read back as float64 through a view.
    """
    for b in range(nb):
        x = max(z[b], -750.0)
        n = np.floor(x * LOG2E + 0.5)
        r = (x - n * LN2_HI) - n * LN2_LO
        poly = ((((((((((((E12 * r + E11) * r + E10) * r + E9) * r + E8) * r + E7) * r + E6) * r + E5) * r + E4)
                     * r + E3) * r + E2) * r + 1.0) * r + 1.0)
        half = np.int64(n) >> 1
        bits[2 * b] = (half + 1023) << 52
        bits[2 * b + 1] = (np.int64(n) - half + 1023) << 52
        z[b] = poly
    scale = bits.view(np.float64)
    for b in range(nb):
        z[b] *= scale[2 * b] * scale[2 * b + 1]


@njit(cache=True, inline="always", fastmath=FAST)
def _posteriors_block(lp, R, nb, top, total, bits):
    """In place ``lp[:, :nb] <-`` posteriors of a block of samples, component-major; returns the block's
    sum of ``log sum_r exp(lp[r])`` (max-shifted, as the reference).

    Vectorized across samples: the ``R`` exponentials are :func:`_exp_block`, and the logarithms of the
    normalizers (each in ``[1, R]``) are taken of their products over 32 samples (``R^32`` stays finite).
    """
    for b in range(nb):
        top[b] = lp[0, b]
    for r in range(1, R):
        for b in range(nb):
            top[b] = max(top[b], lp[r, b])
    for b in range(nb):
        total[b] = 0.0
    for r in range(R):
        row = lp[r]
        for b in range(nb):
            row[b] -= top[b]
        _exp_block(row, nb, bits)
        for b in range(nb):
            total[b] += row[b]
    log_norm = 0.0
    for b in range(nb):
        log_norm += top[b]
    for b0 in range(0, nb, 32):
        product = 1.0
        for b in range(b0, min(b0 + 32, nb)):
            product *= total[b]
        log_norm += np.log(product)
    for b in range(nb):
        total[b] = 1.0 / total[b]
    for r in range(R):
        for b in range(nb):
            lp[r, b] *= total[b]
    return log_norm


@njit(cache=True, inline="always")
def _transpose_block(X, i0, nb, xt):
    """``xt[:, :nb] <- X[i0:i0 + nb].T`` in float64: coordinates become rows, samples the vector lanes."""
    for b in range(nb):
        for j in range(X.shape[1]):
            xt[j, b] = X[i0 + b, j]


@njit(cache=True, inline="always", fastmath=FAST)
def _dot(u, v, nb):
    s = 0.0
    for b in range(nb):
        s += u[b] * v[b]
    return s


@njit(cache=True, inline="always", fastmath=FAST)
def _gaussian_block(xt, nb, k, const, means, precision, layout, lp, diff, t):
    """Component log-densities of a block of samples, ``lp[r, b]`` (direct ``(x - mu)^2``, exact for
    large entries); ``diff`` (d, BLOCK) and ``t`` (BLOCK) are scratch."""
    R, d = means.shape[1], means.shape[2]
    for r in range(R):
        row = lp[r]
        row[:nb] = 0.0
        if layout == 2:  # FULL: ||(x - mu) P||^2, P upper triangular (P[m, j] = 0 for m > j)
            for j in range(d):
                m = means[k, r, j]
                for b in range(nb):
                    diff[j, b] = xt[j, b] - m
            for j in range(d):
                t[:nb] = 0.0
                for q in range(j + 1):
                    c = precision[k, r, q * d + j]
                    for b in range(nb):
                        t[b] += diff[q, b] * c
                for b in range(nb):
                    row[b] += t[b] * t[b]
        else:
            for j in range(d):
                m = means[k, r, j]
                c = precision[k, r, j] if layout == 1 else precision[k, r, 0]
                for b in range(nb):
                    delta = xt[j, b] - m
                    row[b] += delta * delta * c
        c = const[k, r]
        for b in range(nb):
            row[b] = c - 0.5 * row[b]


@parallel_kernel(fastmath=FAST)
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
        xt, diff, lp = np.empty((d, BLOCK)), np.empty((d, BLOCK)), np.empty((R, BLOCK))
        top, total, bits = np.empty(BLOCK), np.empty(BLOCK), np.empty(2 * BLOCK, dtype=np.int64)
        for i0 in range(starts[p], ends[p], BLOCK):
            nb = min(BLOCK, ends[p] - i0)
            _transpose_block(X, i0, nb, xt)
            _gaussian_block(xt, nb, k, const, means, precision, layout, lp, diff, top)
            ll[p] += _posteriors_block(lp, R, nb, top, total, bits)
            if squares == 2:  # top is free after the posteriors: it holds ||x||^2 of the block
                for b in range(nb):
                    top[b] = 0.0
                for j in range(d):
                    for b in range(nb):
                        top[b] += xt[j, b] * xt[j, b]
            for r in range(R):
                g = lp[r]
                N[p, r] += g[:nb].sum()
                for j in range(d):
                    Sx[p, r, j] += _dot(g, xt[j], nb)
                if squares == 1:
                    for j in range(d):
                        for b in range(nb):
                            diff[j, b] = g[b] * xt[j, b]
                        Sxx[p, r, j] += _dot(diff[j], xt[j], nb)
                elif squares == 2:
                    Sxx[p, r, 0] += _dot(g, top, nb)
                elif squares == 3:
                    for j in range(d):
                        for b in range(nb):
                            diff[j, b] = g[b] * xt[j, b]
                        for m in range(j, d):
                            Sxx[p, r, j * d + m] += _dot(diff[j], xt[m], nb)
    return ll, N, Sx, Sxx


@parallel_kernel()
def _stats_pass(X, resp, starts, ends, squares):
    """The sums of :func:`_gaussian_pass` for given responsibilities (starts: k-means labels, one-hot), per
    piece; a zero responsibility adds nothing, so one-hot rows cost one component's work."""
    n_pieces, R, d = len(starts), resp.shape[1], X.shape[1]
    N = np.zeros((n_pieces, R))
    Sx = np.zeros((n_pieces, R, d))
    Sxx = np.zeros((n_pieces, R, d if squares == 1 else d * d if squares == 3 else 1))
    for p in prange(n_pieces):
        for i in range(starts[p], ends[p]):
            for r in range(R):
                g = resp[i, r]
                if g == 0.0:
                    continue
                N[p, r] += g
                total = 0.0
                for j in range(d):
                    x = np.float64(X[i, j])  # float() keeps float32 in Numba: x * x would round
                    Sx[p, r, j] += g * x
                    if squares == 1:
                        Sxx[p, r, j] += g * x * x
                    elif squares == 2:
                        total += x * x
                    elif squares == 3:
                        for m in range(j, d):
                            Sxx[p, r, j * d + m] += g * x * X[i, m]
                if squares == 2:
                    Sxx[p, r, 0] += g * total
    return N, Sx, Sxx


@njit(cache=True, inline="always", fastmath=FAST)
def _regression_block(xt, yb, nb, k, const, coef, inv_var, lp):
    """Component log-densities ``lp[r, b]`` of a block of responses ``yb`` given features ``xt``."""
    R, p_dim = coef.shape[1], coef.shape[2]
    for r in range(R):
        row = lp[r]
        row[:nb] = yb[:nb]
        for j in range(p_dim):
            c = coef[k, r, j]
            for b in range(nb):
                row[b] -= xt[j, b] * c
        c, w = const[k, r], 0.5 * inv_var[k, r]
        for b in range(nb):
            row[b] = c - w * row[b] * row[b]


@parallel_kernel(fastmath=FAST)
def _regression_pass(X, y, starts, ends, owners, const, coef, inv_var):
    n_pieces = len(starts)
    R, p_dim = coef.shape[1], coef.shape[2]
    ll = np.zeros(n_pieces)
    N = np.zeros((n_pieces, R))
    A = np.zeros((n_pieces, R, p_dim, p_dim))
    b_ = np.zeros((n_pieces, R, p_dim))
    Syy = np.zeros((n_pieces, R))
    for p in prange(n_pieces):
        k = owners[p]
        xt, gx, lp = np.empty((p_dim, BLOCK)), np.empty((p_dim, BLOCK)), np.empty((R, BLOCK))
        yb, top, total = np.empty(BLOCK), np.empty(BLOCK), np.empty(BLOCK)
        bits = np.empty(2 * BLOCK, dtype=np.int64)
        for i0 in range(starts[p], ends[p], BLOCK):
            nb = min(BLOCK, ends[p] - i0)
            _transpose_block(X, i0, nb, xt)
            for b in range(nb):
                yb[b] = y[i0 + b]
            _regression_block(xt, yb, nb, k, const, coef, inv_var, lp)
            ll[p] += _posteriors_block(lp, R, nb, top, total, bits)
            for r in range(R):
                g = lp[r]
                N[p, r] += g[:nb].sum()
                for b in range(nb):
                    top[b] = g[b] * yb[b]
                Syy[p, r] += _dot(top, yb, nb)
                for j in range(p_dim):
                    for b in range(nb):
                        gx[j, b] = g[b] * xt[j, b]
                    b_[p, r, j] += _dot(gx[j], yb, nb)
                    for m in range(j, p_dim):  # upper triangle; mirrored below
                        A[p, r, j, m] += _dot(gx[j], xt[m], nb)
    return ll, N, A, b_, Syy


@parallel_kernel(fastmath=FAST)
def _gaussian_log_resp(X, starts, ends, owners, const, means, precision, layout, log_norm, log_resp):
    R, d = means.shape[1], means.shape[2]
    for p in prange(len(starts)):
        xt, diff, lp, t = np.empty((d, BLOCK)), np.empty((d, BLOCK)), np.empty((R, BLOCK)), np.empty(BLOCK)
        for i0 in range(starts[p], ends[p], BLOCK):
            nb = min(BLOCK, ends[p] - i0)
            _transpose_block(X, i0, nb, xt)
            _gaussian_block(xt, nb, owners[p], const, means, precision, layout, lp, diff, t)
            _log_posteriors(lp, nb, i0, log_norm, log_resp)


@parallel_kernel(fastmath=FAST)
def _regression_log_resp(X, y, starts, ends, owners, const, coef, inv_var, log_norm, log_resp):
    R, p_dim = coef.shape[1], coef.shape[2]
    for p in prange(len(starts)):
        xt, lp, yb = np.empty((p_dim, BLOCK)), np.empty((R, BLOCK)), np.empty(BLOCK)
        for i0 in range(starts[p], ends[p], BLOCK):
            nb = min(BLOCK, ends[p] - i0)
            _transpose_block(X, i0, nb, xt)
            for b in range(nb):
                yb[b] = y[i0 + b]
            _regression_block(xt, yb, nb, owners[p], const, coef, inv_var, lp)
            _log_posteriors(lp, nb, i0, log_norm, log_resp)


@njit(cache=True, inline="always")
def _log_posteriors(lp, nb, i0, log_norm, log_resp):
    """Rows ``i0 .. i0 + nb`` of ``log p(x_i)`` and the log posteriors, with the library's exp and log:
    not a per-round path, and log posteriors far below zero must stay exact."""
    R = lp.shape[0]
    for b in range(nb):
        top = lp[0, b]
        for r in range(1, R):
            top = max(top, lp[r, b])
        total = 0.0
        for r in range(R):
            total += np.exp(lp[r, b] - top)
        log_sum = np.log(total)
        log_norm[i0 + b] = top + log_sum
        for r in range(R):
            log_resp[i0 + b, r] = lp[r, b] - top - log_sum


def _writable(a):
    """``a`` as a writable C-ordered float64 array: Numba compiles a read-only array as another type (a
    second compilation of seconds for, say, a fitted estimator's read-only means)."""
    a = np.ascontiguousarray(a, dtype=np.float64)
    return a if a.flags.writeable else a.copy()


def _work(X, theta, starts):
    """A pass's work and tasks for :func:`fedmm.threads.parallel_kernel`: samples x components x
    coordinates, and the pieces."""
    return X.shape[0] * theta.shape[1] * theta.shape[2], len(starts)


def _per_client(values, owners, K):
    """Add piece accumulators up per client: pieces of one client are consecutive and every client has
    one at least, so one ``reduceat`` over the first piece of each (``np.add.at``'s scatter was a third of
    an E-step's time with thousands of small clients; the sums are the same, in the same order). With one
    piece per client, the usual case for small clients, the accumulators already are the sums."""
    if len(owners) == K and np.array_equal(owners, np.arange(K)):
        return values
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
    means = _writable(means)
    ll, N, Sx, Sxx = _gaussian_pass(*_work(X, means, starts), X, starts, ends, owners, const, means, precision, layout,
                                    _SQUARES[squares])
    K = len(offsets) - 1
    return (_per_client(ll, owners, K),) + _gaussian_sums(N, Sx, Sxx, owners, K, squares)


def _gaussian_sums(N, Sx, Sxx, owners, K, squares):
    """The pieces' ``N``, ``Sx`` and ``Sxx`` added up per client, outer products made symmetric."""
    Sxx = None if squares == "none" else _per_client(Sxx, owners, K)
    if squares == "outer":
        Sxx = _mirror(Sxx, Sx.shape[-1])
    return _per_client(N, owners, K), _per_client(Sx, owners, K), Sxx


def gaussian_stats(X, offsets, resp, squares):
    """Per-client GMM statistics for given responsibilities (see :func:`fedmm.kernels._numpy.gaussian_stats`)."""
    starts, ends, owners = _pieces(offsets)
    resp = _writable(resp)
    N, Sx, Sxx = _stats_pass(X.size * resp.shape[1], len(starts), X, resp, starts, ends, _SQUARES[squares])
    return _gaussian_sums(N, Sx, Sxx, owners, len(offsets) - 1, squares)


def regression_estep(X, y, offsets, weights, coef, noise_var):
    """Mixture-of-regressions E-step for all clients (see :func:`fedmm.kernels._numpy.regression_estep`)."""
    starts, ends, owners = _pieces(offsets)
    const, inv_var = _regression_constants(weights, noise_var)
    coef = _writable(coef)
    ll, N, A, b, Syy = _regression_pass(*_work(X, coef, starts), X, y, starts, ends, owners, const, coef, inv_var)
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
    means = _writable(means)
    _gaussian_log_resp(*_work(X, means, starts), X, starts, ends, owners, const, means, precision, layout, log_norm,
                       log_resp)
    return log_norm, log_resp


def regression_log_resp(X, y, offsets, weights, coef, noise_var):
    """Per-sample ``log p(y_i | x_i)`` and log posteriors (see :func:`fedmm.kernels._numpy.regression_log_resp`)."""
    starts, ends, owners = _pieces(offsets)
    const, inv_var = _regression_constants(weights, noise_var)
    log_norm, log_resp = np.empty(len(X)), np.empty((len(X), weights.shape[1]))
    coef = _writable(coef)
    _regression_log_resp(*_work(X, coef, starts), X, y, starts, ends, owners, const, coef, inv_var, log_norm, log_resp)
    return log_norm, log_resp
