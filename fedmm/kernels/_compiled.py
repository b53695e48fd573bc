"""What the families' Numba kernels share: the pieces a pass runs over in parallel, the blocks a piece is walked
in, and the vectorized log-sum-exp (:mod:`fedmm.kernels.gaussian`, :mod:`fedmm.kernels.regression`).

The contiguous sample array is cut into pieces of at most ``PIECE`` samples that never cross a client boundary;
``prange`` runs over the pieces (on one thread for small passes: :func:`fedmm.threads.parallel_kernel`), each
accumulating its own sums (so threads never share an accumulator), which are then added up per client. A piece is
walked in blocks of ``BLOCK`` samples, copied transposed so that samples are the vector lanes: per block a family's
kernel computes the component log-densities, the log-sum-exp (with an exponential LLVM vectorizes,
:func:`_exp_block`) and the responsibilities, and accumulates what the family's M-step or gradient needs as dot
products over the block, never storing the (n, R) responsibility matrix. ``X`` may be float32 or float64;
arithmetic and sums are in float64. Compiled on first use and cached on disk (``cache=True``), so importing fedmm
compiles nothing.
"""

from functools import lru_cache

import numpy as np
from numba import njit

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


def mirror_upper(S):
    """Outer-product sums (..., d, d) accumulated on the upper triangle, made symmetric in place: the lower triangle
    copied from the upper (the numbers of ``triu(S) + triu(S, 1)^T``, without its three full-size arrays: 1.2 s of
    a 6 s sparse regression fit at ``d = 500``)."""
    S = np.ascontiguousarray(S)
    _mirror_upper(S.reshape((-1,) + S.shape[-2:]))
    return S


@njit(cache=True)
def _mirror_upper(S):
    d = S.shape[-1]
    for i in range(S.shape[0]):
        for j in range(d):
            for m in range(j + 1, d):
                S[i, m, j] = S[i, j, m]
