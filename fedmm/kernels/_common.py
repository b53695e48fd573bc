"""What the families' numpy kernels share: the loop over clients, the log-sum-exp and the stacking of per-client
sums (the reference's machinery, :mod:`fedmm.kernels.gaussian` and :mod:`fedmm.kernels.regression`).

Every kernel covers all clients in one call over the contiguous sample array (client ``k`` owns rows
``offsets[k]:offsets[k + 1]``) and uses client ``k``'s own parameters on its rows. Inside, the loop runs over
clients and components, never over samples; each block is dense linear algebra.

Shapes: ``X`` (n, p), ``y`` (n,), ``weights`` (K, R), component parameters ``theta`` (K, R, p), variances
``scale`` (K, R, s) with ``s`` either 1 (one variance per component), ``p`` (one per coordinate) or ``p * p`` (a
full covariance matrix, row-major; :func:`fedmm.kernels.gaussian.is_full`). ``X`` and ``y`` may be stored in
float32; every backend computes in float64 (``_f64``).
"""

import numpy as np

LOG_2PI = np.log(2.0 * np.pi)


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
