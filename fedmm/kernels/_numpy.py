"""Numpy reference kernels: the oracle every fast path is tested against.

Every public function covers all clients in one call over the contiguous
sample array (client ``k`` owns rows ``offsets[k]:offsets[k + 1]``) and uses
client ``k``'s own parameters on its rows. Inside, the loop runs over clients
and components, never over samples; each block is dense linear algebra.

Shapes: ``X`` (n, p), ``y`` (n,), ``weights`` (K, R), component parameters
``theta`` (K, R, p), variances ``scale`` (K, R, s) with ``s`` either 1 (one
variance per component), ``p`` (one per coordinate) or ``p * p`` (a full
covariance matrix, row-major; :func:`is_full`). ``X`` and ``y`` may be stored
in float32; every backend computes in float64 (``_f64``).
"""

import numpy as np

LOG_2PI = np.log(2.0 * np.pi)


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


# --- one client's block --------------------------------------------------------------

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


def _regression_log_prob(X, y, coef, noise_var):
    """log N(y_i; x_i^T theta_r, sigma_r^2) for one client, shape (n_k, R).

    FedGrEM Sec. 3.4, eq. (5): the conditional density of ``y`` given ``x``;
    the density of ``x`` is the same for every component and cancels from the
    posterior.
    """
    resid = y[:, None] - X @ coef.T
    var = noise_var[:, 0]
    return -0.5 * (LOG_2PI + np.log(var) + resid ** 2 / var)


def _log_normalize(weighted_log_prob):
    """Log-sum-exp over components: ``(log p(x_i), log posterior (n_k, R))``.

    The posterior is normalized from the max-shifted values, not as
    ``log_prob - log_norm``: both of those can be of size 1e12 for far-out
    samples, and their difference would lose the digits that make rows sum to 1.
    """
    top = weighted_log_prob.max(axis=1, keepdims=True)
    shifted = weighted_log_prob - top
    log_sum = np.log(np.exp(shifted).sum(axis=1))
    return top[:, 0] + log_sum, shifted - log_sum[:, None]


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


def _regression_stats(X, y, resp):
    """``N_r``, ``A_r = sum_i g_ir x_i x_i^T``, ``b_r = sum_i g_ir y_i x_i``, ``sum_i g_ir y_i^2``."""
    A = np.stack([(X * g[:, None]).T @ X for g in resp.T])
    return resp.sum(axis=0), A, resp.T @ (X * y[:, None]), resp.T @ (y * y)


# --- all clients ---------------------------------------------------------------------

def _f64(a):
    """Samples stored in float32 are computed with in float64, as every backend does."""
    return None if a is None else np.asarray(a, dtype=np.float64)


def _blocks(offsets):
    return [slice(a, b) for a, b in zip(offsets[:-1], offsets[1:])]


def _stack(per_client):
    return tuple(None if f[0] is None else np.stack(f) for f in zip(*per_client))


def _estep(offsets, weights, log_prob, stats):
    """E-step of every client: its log-likelihood and its responsibility-weighted statistics."""
    loglik = np.empty(len(offsets) - 1)
    per_client = []
    with np.errstate(divide="ignore"):
        log_w = np.log(weights)
    for k, sl in enumerate(_blocks(offsets)):
        log_norm, log_resp = _log_normalize(log_prob(k, sl) + log_w[k])
        loglik[k] = log_norm.sum()
        per_client.append(stats(sl, np.exp(log_resp)))
    return (loglik,) + _stack(per_client)


def _log_resp(offsets, weights, log_prob):
    n = offsets[-1]
    log_norm = np.empty(n)
    log_resp = np.empty((n, weights.shape[1]))
    with np.errstate(divide="ignore"):
        log_w = np.log(weights)
    for k, sl in enumerate(_blocks(offsets)):
        log_norm[sl], log_resp[sl] = _log_normalize(log_prob(k, sl) + log_w[k])
    return log_norm, log_resp


def gaussian_estep(X, offsets, weights, means, variances, squares):
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


def regression_estep(X, y, offsets, weights, coef, noise_var):
    """Mixture-of-regressions E-step for all clients.

    Returns
    -------
    loglik : (K,), N : (K, R), A : (K, R, p, p), b : (K, R, p), Syy : (K, R)
    """
    X, y = _f64(X), _f64(y)
    return _estep(offsets, weights,
                  lambda k, sl: _regression_log_prob(X[sl], y[sl], coef[k], noise_var[k]),
                  lambda sl, resp: _regression_stats(X[sl], y[sl], resp))


def gaussian_log_resp(X, offsets, weights, means, variances):
    """Per-sample ``log p(x_i)`` (n,) and log posteriors (n, R) for all clients."""
    X = _f64(X)
    return _log_resp(offsets, weights, lambda k, sl: _gaussian_log_prob(X[sl], means[k], variances[k]))


def regression_log_resp(X, y, offsets, weights, coef, noise_var):
    """Per-sample ``log p(y_i | x_i)`` (n,) and log posteriors (n, R) for all clients."""
    X, y = _f64(X), _f64(y)
    return _log_resp(offsets, weights,
                     lambda k, sl: _regression_log_prob(X[sl], y[sl], coef[k], noise_var[k]))


def gaussian_stats(X, offsets, resp, squares):
    """Per-client GMM statistics for given responsibilities (used at initialization)."""
    X = _f64(X)
    return _stack([_gaussian_stats(X[sl], resp[sl], squares) for sl in _blocks(offsets)])


def regression_stats(X, y, offsets, resp):
    """Per-client regression statistics for given responsibilities (used at initialization)."""
    X, y = _f64(X), _f64(y)
    return _stack([_regression_stats(X[sl], y[sl], resp[sl]) for sl in _blocks(offsets)])
