"""The regression family's kernels (FedGrEM Sec. 3.4, eq. (5)): the E-step, posteriors and responsibility-weighted
sums of a mixture of linear regressions, in each backend's implementation; :func:`fedmm.kernels.get_kernels` gives a
backend's as ``regression_estep``, ``regression_log_resp`` and ``regression_stats``.

- the numpy reference (:func:`estep`, :func:`log_resp`, :func:`stats`), the oracle every fast path is tested against;
- Numba (:func:`numba_estep`, :func:`numba_log_resp`; the reference's :func:`stats`): one fused, parallel pass over
  the samples per round (:mod:`fedmm.kernels._compiled`);
- the array module (:func:`array_estep`, :func:`array_log_resp`; the reference's :func:`stats`): the CuPy path
  (:mod:`fedmm.kernels._array_module`).

Shapes and conventions: :mod:`fedmm.kernels._common`.
"""

import numpy as np
from numba import njit, prange

from ..threads import parallel_kernel
from ._common import LOG_2PI, _blocks, _estep, _f64, _log_resp, _stack
from ._compiled import (BLOCK, FAST, _dot, _log_posteriors, _per_client, _pieces, _posteriors_block, mirror_upper,
                        _transpose_block, _work, _writable)

def _regression_log_prob(X, y, coef, noise_var):
    """log N(y_i; x_i^T theta_r, sigma_r^2) for one client, shape (n_k, R).

    FedGrEM Sec. 3.4, eq. (5): the conditional density of ``y`` given ``x``;
    the density of ``x`` is the same for every component and cancels from the
    posterior.
    """
    resid = y[:, None] - X @ coef.T
    var = noise_var[:, 0]
    return -0.5 * (LOG_2PI + np.log(var) + resid ** 2 / var)


def _regression_stats(X, y, resp):
    """``N_r``, ``A_r = sum_i g_ir x_i x_i^T``, ``b_r = sum_i g_ir y_i x_i``, ``sum_i g_ir y_i^2``."""
    A = np.stack([(X * g[:, None]).T @ X for g in resp.T])
    return resp.sum(axis=0), A, resp.T @ (X * y[:, None]), resp.T @ (y * y)


def estep(X, y, offsets, weights, coef, noise_var):
    """Mixture-of-regressions E-step for all clients.

    Returns
    -------
    loglik : (K,), N : (K, R), A : (K, R, p, p), b : (K, R, p), Syy : (K, R)
    """
    X, y = _f64(X), _f64(y)
    return _estep(offsets, weights,
                  lambda k, sl: _regression_log_prob(X[sl], y[sl], coef[k], noise_var[k]),
                  lambda sl, resp: _regression_stats(X[sl], y[sl], resp))


def log_resp(X, y, offsets, weights, coef, noise_var):
    """Per-sample ``log p(y_i | x_i)`` (n,) and log posteriors (n, R) for all clients."""
    X, y = _f64(X), _f64(y)
    return _log_resp(offsets, weights,
                     lambda k, sl: _regression_log_prob(X[sl], y[sl], coef[k], noise_var[k]))


def stats(X, y, offsets, resp):
    """Per-client regression statistics for given responsibilities (used at initialization)."""
    X, y = _f64(X), _f64(y)
    return _stack([_regression_stats(X[sl], y[sl], resp[sl]) for sl in _blocks(offsets)])


# --- Numba ---------------------------------------------------------------------------

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


def _regression_constants(weights, noise_var):
    var = noise_var[..., 0]
    with np.errstate(divide="ignore"):
        return np.log(weights) - 0.5 * (LOG_2PI + np.log(var)), 1.0 / var


def numba_estep(X, y, offsets, weights, coef, noise_var):
    """Mixture-of-regressions E-step for all clients (see :func:`estep`)."""
    starts, ends, owners = _pieces(offsets)
    const, inv_var = _regression_constants(weights, noise_var)
    coef = _writable(coef)
    ll, N, A, b, Syy = _regression_pass(*_work(X, coef, starts), X, y, starts, ends, owners, const, coef, inv_var)
    K = len(offsets) - 1
    A = mirror_upper(_per_client(A, owners, K))
    return _per_client(ll, owners, K), _per_client(N, owners, K), A, _per_client(b, owners, K), \
        _per_client(Syy, owners, K)


def numba_log_resp(X, y, offsets, weights, coef, noise_var):
    """Per-sample ``log p(y_i | x_i)`` and log posteriors (see :func:`log_resp`)."""
    starts, ends, owners = _pieces(offsets)
    const, inv_var = _regression_constants(weights, noise_var)
    log_norm, log_resp = np.empty(len(X)), np.empty((len(X), weights.shape[1]))
    coef = _writable(coef)
    _regression_log_resp(*_work(X, coef, starts), X, y, starts, ends, owners, const, coef, inv_var, log_norm, log_resp)
    return log_norm, log_resp


# --- the array module (CuPy) ----------------------------------------------------------

def _array_log_prob(am, Xk, yk, coef, noise_var):
    """log N(y; x^T theta_r, sigma_r^2) of one client's rows on the array module ``am``
    (:class:`fedmm.kernels._array_module.ArrayModule`): FedGrEM Sec. 3.4, eq. (5)."""
    var = noise_var[:, 0]
    resid = yk[:, None] - Xk @ coef.T
    return -0.5 * (LOG_2PI + am.xp.log(var) + resid * resid / var)


def array_estep(am, X, y, offsets, weights, coef, noise_var):
    """Mixture-of-regressions E-step for all clients on the array module ``am`` (see :func:`estep`)."""
    xp = am.xp
    X, y = am.device(X), am.device(y)
    coef, noise_var = xp.asarray(coef), xp.asarray(noise_var)

    def stats(sl, resp):
        Xk, yk = X[sl], y[sl]
        A = xp.stack([(Xk * g[:, None]).T @ Xk for g in resp.T])
        return am.column_sums(resp), A, resp.T @ (Xk * yk[:, None]), resp.T @ (yk * yk)

    rows = am.over_clients(offsets, weights,
                           lambda k, sl: _array_log_prob(am, X[sl], y[sl], coef[k], noise_var[k]), stats)
    return tuple(am.host(xp.stack(f)) for f in zip(*rows))


def array_log_resp(am, X, y, offsets, weights, coef, noise_var):
    """Per-sample ``log p(y_i | x_i)`` and log posteriors on the array module ``am`` (see :func:`log_resp`)."""
    X, y = am.device(X), am.device(y)
    coef, noise_var = am.xp.asarray(coef), am.xp.asarray(noise_var)
    return am.log_resp(am.over_clients(offsets, weights,
                                       lambda k, sl: _array_log_prob(am, X[sl], y[sl], coef[k], noise_var[k]), None))
