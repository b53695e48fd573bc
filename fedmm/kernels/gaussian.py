"""The Gaussian family's kernels (FedGrEM Sec. 3.3, eq. (4)): its E-step, posteriors and responsibility-weighted
sums, in each backend's implementation; :func:`fedmm.kernels.get_kernels` gives a backend's as ``gaussian_estep``,
``gaussian_log_resp`` and ``gaussian_stats``.

- the numpy reference (:func:`estep`, :func:`log_resp`, :func:`stats`), the oracle every fast path is tested against;
- Numba (:func:`numba_estep`, :func:`numba_log_resp`, :func:`numba_stats`): one fused, parallel pass over the
  samples per round (:mod:`fedmm.kernels._compiled`);
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

def is_full(variances, d):
    """Whether ``variances`` (..., s) hold full ``d x d`` covariance matrices (``s = d^2``; for ``d = 1``
    the three layouts coincide)."""
    return d > 1 and variances.shape[-1] == d * d


def precision_cholesky(covariances):
    """``P`` (upper triangular) with ``Sigma^{-1} = P P^T`` for covariances (..., d, d), as scikit-learn's
    ``precisions_cholesky_``: ``log N(x; mu, Sigma) = -(d log 2 pi + ||(x - mu) P||^2) / 2 + sum log diag P``.

    Raises ValueError when a covariance is not positive definite (a component collapsed onto fewer
    than ``d`` dimensions), with the remedy.
    """
    try:
        L = np.linalg.cholesky(covariances)
    except np.linalg.LinAlgError:
        raise ValueError("A component's covariance matrix is not positive definite (it collapsed onto a subspace: "
                         "too few samples for its d(d+1)/2 parameters, or collinear features). Increase reg_covar, "
                         "use fewer components, or covariance_type='diag' or 'tied'.") from None
    eye = np.broadcast_to(np.eye(L.shape[-1]), L.shape)
    return np.swapaxes(np.linalg.solve(L, eye), -1, -2)


def _gaussian_log_prob(X, means, variances):
    """log N(x_i; mu_r, diag(sigma_r^2)) for one client, shape (n_k, R).

    FedGrEM Sec. 3.3, eq. (4) with the identity covariance when all variances
    are 1. The squared distance is formed from ``x - mu`` directly (not by
    expanding the square) so it stays exact for entries of size 1e6.
    """
    n, d = X.shape
    out = np.empty((n, means.shape[0]))
    if is_full(variances, d):  # N(mu_r, Sigma_r) through Sigma_r^{-1} = P_r P_r^T
        P = precision_cholesky(variances.reshape(-1, d, d))
        for r, (mu, P_r) in enumerate(zip(means, P)):
            out[:, r] = (((X - mu) @ P_r) ** 2).sum(axis=1) - 2.0 * np.log(np.diag(P_r)).sum()
        return -0.5 * (d * LOG_2PI + out)
    for r, (mu, var) in enumerate(zip(means, variances)):
        out[:, r] = ((X - mu) ** 2 / var).sum(axis=1) + np.log(var).sum() * (d / var.size)
    return -0.5 * (d * LOG_2PI + out)


SQUARES = ("none", "coordinates", "total", "outer")


def _gaussian_stats(X, resp, squares):
    """Responsibility sums ``N_r``, ``sum_i g_ir x_i`` and the squares a variance needs.

    ``squares``: "none"; "coordinates", ``sum_i g_ir x_ij^2`` per coordinate
    (diagonal variances); "total", ``sum_i g_ir ||x_i||^2`` (spherical), shape (R, 1);
    "outer", ``sum_i g_ir x_i x_i^T`` (full and tied covariances), shape (R, d * d).
    """
    if squares == "none":
        Sxx = None
    elif squares == "coordinates":
        Sxx = resp.T @ (X * X)
    elif squares == "outer":
        Sxx = np.stack([((X * g[:, None]).T @ X).ravel() for g in resp.T])
    else:
        Sxx = resp.T @ (X * X).sum(axis=1, keepdims=True)
    return resp.sum(axis=0), resp.T @ X, Sxx


def estep(X, offsets, weights, means, variances, squares):
    """GMM E-step for all clients.

    Returns
    -------
    loglik : (K,) sum of log p(x_i) per client
    N : (K, R), Sx : (K, R, p), Sxx : (K, R, p), (K, R, 1), (K, R, p * p) or None (see ``_gaussian_stats``)
    """
    X = _f64(X)
    return _estep(offsets, weights,
                  lambda k, sl: _gaussian_log_prob(X[sl], means[k], variances[k]),
                  lambda sl, resp: _gaussian_stats(X[sl], resp, squares))


def log_resp(X, offsets, weights, means, variances):
    """Per-sample ``log p(x_i)`` (n,) and log posteriors (n, R) for all clients."""
    X = _f64(X)
    return _log_resp(offsets, weights, lambda k, sl: _gaussian_log_prob(X[sl], means[k], variances[k]))


def stats(X, offsets, resp, squares):
    """Per-client GMM statistics for given responsibilities (used at initialization)."""
    X = _f64(X)
    return _stack([_gaussian_stats(X[sl], resp[sl], squares) for sl in _blocks(offsets)])


# --- Numba ---------------------------------------------------------------------------

#: How ``precision`` is laid out: one per component, one per coordinate, or a flattened ``P`` (full).
SPHERICAL, DIAGONAL, FULL = 0, 1, 2


def _gaussian_constants(weights, means, variances):
    """Per client and component: ``log w - (d log 2 pi + log det Sigma) / 2``, the precisions and their
    layout: (K, R, 1) or (K, R, d) inverse variances, or (K, R, d * d) the upper-triangular ``P`` with
    ``Sigma^{-1} = P P^T`` (:func:`precision_cholesky`). Variances that are one row broadcast to every client
    (the pooled start's, :meth:`fedmm.families.MixtureParams.broadcast`) are factored once, not ``K`` times."""
    K, R, d = means.shape
    with np.errstate(divide="ignore"):
        log_w = np.log(weights)
    shared = K > 1 and variances.strides[0] == 0
    log_det, precision, layout = _precisions(variances[:1] if shared else variances, d)
    precision = np.broadcast_to(precision, (K,) + precision.shape[1:]) if shared else precision
    # C order whatever the layout of log_det: a compiled pass takes one signature per layout, each a compile.
    return np.ascontiguousarray(log_w - 0.5 * (d * LOG_2PI + log_det)), np.ascontiguousarray(precision), layout


def _precisions(variances, d):
    """``(log det Sigma, precisions, layout)`` of variances (K, R, s) (:func:`_gaussian_constants`)."""
    K, R = variances.shape[:2]
    if is_full(variances, d):
        P = precision_cholesky(variances.reshape(K, R, d, d))
        return -2.0 * np.log(np.diagonal(P, axis1=-2, axis2=-1)).sum(axis=-1), P.reshape(K, R, d * d), FULL
    log_det = np.einsum("krs->kr", np.log(variances)) * (d / variances.shape[-1])  # einsum: a short axis
    return log_det, np.asarray(1.0 / variances, dtype=np.float64), DIAGONAL if variances.shape[-1] > 1 else SPHERICAL


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


#: The compiled passes' code of each kind of squares (:data:`SQUARES`).
_SQUARES = {squares: code for code, squares in enumerate(SQUARES)}


def numba_estep(X, offsets, weights, means, variances, squares):
    """GMM E-step for all clients (see :func:`estep`)."""
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
        d = Sx.shape[-1]
        Sxx = mirror_upper(Sxx.reshape(Sxx.shape[:-1] + (d, d))).reshape(Sxx.shape)
    return _per_client(N, owners, K), _per_client(Sx, owners, K), Sxx


def numba_stats(X, offsets, resp, squares):
    """Per-client GMM statistics for given responsibilities (see :func:`stats`)."""
    starts, ends, owners = _pieces(offsets)
    resp = _writable(resp)
    N, Sx, Sxx = _stats_pass(X.size * resp.shape[1], len(starts), X, resp, starts, ends, _SQUARES[squares])
    return _gaussian_sums(N, Sx, Sxx, owners, len(offsets) - 1, squares)


def numba_log_resp(X, offsets, weights, means, variances):
    """Per-sample ``log p(x_i)`` and log posteriors (see :func:`log_resp`)."""
    starts, ends, owners = _pieces(offsets)
    const, precision, layout = _gaussian_constants(weights, means, variances)
    log_norm, log_resp = np.empty(len(X)), np.empty((len(X), weights.shape[1]))
    means = _writable(means)
    _gaussian_log_resp(*_work(X, means, starts), X, starts, ends, owners, const, means, precision, layout, log_norm,
                       log_resp)
    return log_norm, log_resp


# --- the array module (CuPy) ----------------------------------------------------------

def _array_log_prob(am, Xk, means, variances):
    """log N(x; mu_r, diag(sigma_r^2)) of one client's rows on the array module ``am``
    (:class:`fedmm.kernels._array_module.ArrayModule`): FedGrEM Sec. 3.3, eq. (4) (identity when all variances are
    1), the squared distance expanded into three matrix products."""
    xp = am.xp
    d = Xk.shape[1]
    if is_full(variances, d):
        # Full covariances: ||(x - mu_r) P_r||^2 with Sigma_r^{-1} = P_r P_r^T, factored on the host (R d x d).
        P = xp.asarray(precision_cholesky(am.host(variances).reshape(-1, d, d)))
        maha = xp.stack([(((Xk - mu) @ P_r) ** 2).sum(axis=1) for mu, P_r in zip(means, P)], axis=1)
        log_det = -2.0 * xp.log(xp.diagonal(P, axis1=-2, axis2=-1)).sum(axis=-1)
        return -0.5 * (d * LOG_2PI + log_det + maha)
    precision = xp.broadcast_to(1.0 / variances, means.shape)
    maha = (Xk * Xk) @ precision.T - 2.0 * Xk @ (means * precision).T + (means * means * precision).sum(1)
    log_det = xp.log(variances).sum(axis=1) * (d / variances.shape[1])
    return -0.5 * (d * LOG_2PI + log_det + maha)


def array_estep(am, X, offsets, weights, means, variances, squares):
    """GMM E-step for all clients on the array module ``am`` (see :func:`estep`)."""
    xp = am.xp
    X = am.device(X)
    means, variances = xp.asarray(means), xp.asarray(variances)

    def stats(sl, resp):
        Xk = X[sl]
        Sxx = {"none": None, "coordinates": lambda: resp.T @ (Xk * Xk),
               "total": lambda: resp.T @ (Xk * Xk).sum(axis=1, keepdims=True),
               "outer": lambda: xp.stack([((Xk * g[:, None]).T @ Xk).ravel() for g in resp.T])}[squares]
        return am.column_sums(resp), resp.T @ Xk, None if Sxx is None else Sxx()

    rows = am.over_clients(offsets, weights, lambda k, sl: _array_log_prob(am, X[sl], means[k], variances[k]), stats)
    return tuple(None if f[0] is None else am.host(xp.stack(f)) for f in zip(*rows))


def array_log_resp(am, X, offsets, weights, means, variances):
    """Per-sample ``log p(x_i)`` and log posteriors on the array module ``am`` (see :func:`log_resp`)."""
    X = am.device(X)
    means, variances = am.xp.asarray(means), am.xp.asarray(variances)
    return am.log_resp(am.over_clients(offsets, weights,
                                       lambda k, sl: _array_log_prob(am, X[sl], means[k], variances[k]), None))
