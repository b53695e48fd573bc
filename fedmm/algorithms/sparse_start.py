"""A start for sparse mixtures of regressions with fewer rows per client than features (issue 64).

The dense starts fit every coefficient: a client's random partition or local EM with ``n_k < d`` rows
interpolates its data, and the trimmed pooled start's M-step estimates ``d`` noise coordinates for each
component. :func:`regression_screened_start` instead reads the clients' E-step sums at two chosen parameters
(no new kind of query, no rows leave a client), screens the features whose coefficients are not zero, and
builds the start from a spectral estimate on those features alone (Cai-style moment methods for mixtures of
regressions; Yi, Caramanis & Sanghavi 2014, Sec. 3, spectral start of mixed linear regression):

1. Every client's E-step at ``theta_r = 0`` for all ``r``, with noise variances ``tau^2 SPLIT^{(2r/(R-1) - 1)}``
   about ``tau^2`` (the pooled ``E[y^2]``, from a first E-step at unit variances): the responsibilities are
   then a function of ``y^2`` alone, the last component holding the rows of large ``|y|``, the first those of
   small ``|y|``. Its sums give, for each feature in the fit's units (each feature scaled to unit second
   moment, :meth:`fedmm.families.RegressionFamily.units`), the contrast
   ``D = A_hi / N_hi - A_lo / N_lo`` of the second moments of ``x`` between large and small ``|y|``, and
   ``m = sum_r b_r / n``, the first moment ``E[y x]``.
2. For ``x ~ N(0, I)`` and components of one noise level ``tau^2 = E[y^2]``, ``E[x x^T | y, r] = I + (y^2 /
   tau^2 - 1) beta_r beta_r^T / tau^2``, so ``D = Delta / tau^4 sum_r w_r beta_r beta_r^T`` with ``Delta =
   E_hi[y^2] - E_lo[y^2]`` (Syy over N of the two components), and ``m = sum_r w_r beta_r``: the diagonal of
   ``D`` is ``2 Cov(y^2, x_j^2)``'s kind of statistic, non-zero exactly on the features some component uses,
   also where ``E[y x_j] = 0`` (a symmetric mixture, FedGrEM's MoR model Sec. 3.4). A feature enters where
   ``D_jj`` or ``|m_j|`` stands out from the other features' by more than :func:`screen_level` robust standard
   deviations (median and MAD over the features: most carry noise only; Efron's empirical null, JASA 2004).
3. On the screened features ``S``, ``C = D_SS tau^4 / Delta - m_S m_S^T = sum_r w_r (beta_r - m)(beta_r - m)^T``:
   its top ``R - 1`` eigenvectors span the components' contrasts. Two components of equal weight sit at
   ``m +- sqrt(lambda_1) v_1``; for more, candidates ``m + V diag(sqrt(lambda)) u_r`` with random ``u_r``.
   The clients score the candidates in one query; the one the median client fits best per sample wins
   (as :func:`fedmm.initialization.screened_start`), and the clients fit their variances to it.

Clients are pooled by a trimmed mean over clients (:data:`fedmm.robust.TRIM` of them at each end, coordinate-wise),
so that an outlier client cannot move the screen. Sparse FedGrEM's rounds then grow the support beyond the
screened features: a feature the screen missed is found once the components are apart.
"""

import numpy as np
from scipy.stats import norm

from ..families import MixtureParams
from ..protocol import Broadcast
from ..robust import TRIM, first_best

__all__ = ["regression_screened_start", "screen_level", "split_params", "screened_coefficients", "spectral_start"]

#: The noise variances of the split E-step are ``tau^2`` times powers of ``SPLIT`` from ``1 / SPLIT`` to ``SPLIT``.
SPLIT = 3.0
#: The family-wise error rate of the screen over the ``d`` features (:func:`screen_level`).
SCREEN_LEVEL = 0.01
#: Candidate starts scored by the clients (more than two components).
CANDIDATES = 10
#: Up to this many features there is nothing to screen: the start is FedGrEM's (``"pooled-and-local"``, the dispatch
#: in :func:`fedmm.initialization.make_starts`; with one feature and three lines apart in their intercepts, iris's
#: petals, the spectral start, whose intercepts all start at the mean, left two components empty), and every
#: feature enters the spectral start where it is called directly (:func:`screened_coefficients`).
FEW = 20


def screen_level(d):
    """The screen's cut in robust standard deviations: Bonferroni's ``Phi^{-1}(1 - SCREEN_LEVEL / (2 d))`` over the
    ``d`` features and the two statistics (about 4.2 at ``d = 500``)."""
    return float(norm.isf(SCREEN_LEVEL / (2.0 * d)))


def split_params(n_clients, n_components, p, variances):
    """Parameters (K, R, p) with every coefficient 0, equal proportions and the noise ``variances`` (R,): at them
    a client's responsibilities depend on ``y^2`` alone (step 1 of the module docstring)."""
    R = n_components
    return MixtureParams(np.full((n_clients, R), 1.0 / R), np.zeros((n_clients, R, p)),
                         np.broadcast_to(np.asarray(variances, dtype=float)[None, :, None], (n_clients, R, 1)).copy())


def _pooled(values, trim=TRIM):
    """The coordinate-wise trimmed mean over clients (axis 0) of ``values``: ``floor(trim K)`` at each end left out."""
    v = np.sort(values, axis=0)
    cut = int(np.floor(trim * len(v)))
    return v[cut:len(v) - cut].mean(axis=0)


def _robust_z(t, centre):
    """``(t - centre) / (1.4826 MAD)`` over the features, the MAD about ``centre``: each in standard deviations of the
    bulk (the noise)."""
    mad = 1.4826 * np.median(np.abs(t - centre))
    return (t - centre) / (mad if mad > 0 else 1.0)


def screened_coefficients(contrast, first):
    """The features whose second-moment contrast ``D_jj`` (d,) or first moment ``|m_j|`` (d,) stands out
    (:func:`screen_level`, module docstring step 2), strongest first; the strongest one where none passes (a
    start needs a direction; the rounds find the rest); all where there are at most :data:`FEW` features (too
    few for a null of their own, and no need to screen). ``D_jj`` is compared with the median feature's, ``m_j``
    with 0 (centred data: ``E[y x_j] = 0`` off the support), so that a feature's sign flip changes nothing."""
    d = len(contrast)
    if d <= FEW:
        return np.arange(d)
    z = np.maximum(_robust_z(contrast, np.median(contrast)), np.abs(_robust_z(first, 0.0)))
    keep = np.flatnonzero(z > screen_level(d))
    return keep[np.argsort(-z[keep], kind="stable")] if keep.size else np.array([int(np.argmax(z))])


def spectral_start(D, m, delta, tau2, n_components, random_state, n_candidates=CANDIDATES):
    """Candidate coefficients (n_candidates, R, |S|) on the screened features from ``D_SS``, ``m_S``, ``Delta`` and
    ``tau^2`` (module docstring step 3); two components: the one candidate ``m +- sqrt(lambda_1) v_1``.

    Each eigenvector's sign makes ``v . m >= 0`` and each candidate's components come in decreasing ``beta_r . m``:
    both unchanged by a feature's sign flip (``v -> F v``, ``m -> F m``), so the start, its labels included, follows
    the data (equivariance, ``docs/units.md``)."""
    C = D * tau2 ** 2 / max(delta, 1e-12) - np.outer(m, m)
    lam, V = np.linalg.eigh((C + C.T) / 2.0)
    top = np.argsort(-lam, kind="stable")[:max(n_components - 1, 1)]
    V = V[:, top] * np.where(V[:, top].T @ m < 0, -1.0, 1.0)
    spread = V * np.sqrt(np.maximum(lam[top], 0.0))
    if n_components == 2:
        candidates = (m + np.array([1.0, -1.0])[:, None] * spread[:, 0])[None]
    else:
        candidates = m + np.einsum("srk,jk->srj", random_state.standard_normal((n_candidates, n_components,
                                                                                len(top))), spread)
    order = np.argsort(-(candidates @ m), axis=1, kind="stable")
    return np.take_along_axis(candidates, order[..., None], axis=1)


def regression_screened_start(family, clients, n_components, n_features, random_state):
    """The start of the module docstring as a generator of its queries (run it with :func:`fedmm.engine.drive`):
    MixtureParams (K, R, p) in the fit's units, its variances fitted by each client
    (:meth:`fedmm.clients.LocalClients.user_start`). ``family`` is a regression family fitted in per-feature units
    (``whiten=False``); ``clients`` any transport."""
    return (yield from _screened_regression(family, clients, n_components, n_features, random_state))


def _estep_sums(strategy, params):
    """A run that asks every client's E-step sums at ``params`` (one round of ``strategy``, which sends them)."""
    yield "start", strategy, params
    replies, _ = yield "step", strategy, Broadcast(params), None
    return replies.stats


def _loglik(params):
    """A run that asks the clients' log-likelihoods at ``params`` (side by side with others: one query)."""
    return (yield "loglik", params)


def _screened_regression(family, clients, R, d, random_state):
    """:func:`regression_screened_start` as a generator of its queries (:func:`fedmm.engine.drive`)."""
    from .sparse import SparseFedGrEM, sparse_coordinates          # the strategy whose clients send their sums
    K, n = clients.n_clients, clients.n_samples.astype(float)
    p = family.param_dim(d)
    strategy = SparseFedGrEM()
    unit = yield from _estep_sums(strategy, split_params(K, R, p, np.ones(R)))
    tau2 = float(_pooled(unit.Syy.sum(axis=1) / n))
    stats = yield from _estep_sums(strategy, split_params(K, R, p, tau2 * SPLIT ** np.linspace(-1.0, 1.0, R)))
    q = sparse_coordinates(family, p)
    N = np.maximum(stats.N, 1e-12)
    D = _pooled(stats.A[:, -1, :q, :q] / N[:, -1, None, None] - stats.A[:, 0, :q, :q] / N[:, 0, None, None])
    m = _pooled(stats.b[:, :, :q].sum(axis=1) / n[:, None])
    delta = float(_pooled(stats.Syy[:, -1] / N[:, -1] - stats.Syy[:, 0] / N[:, 0]))
    keep = screened_coefficients(np.diagonal(D), m)
    on_keep = spectral_start(D[np.ix_(keep, keep)], m[keep], delta, tau2, R, random_state)
    theta = np.zeros((len(on_keep), R, p))
    theta[:, :, keep] = on_keep
    noise = np.maximum(tau2 - np.einsum("srj,srj->s", on_keep, on_keep) / R, 0.05 * tau2)
    candidates = [MixtureParams(np.full((K, R), 1.0 / R), np.broadcast_to(t, (K, R, p)).copy(),
                                np.full((K, R, 1), v)) for t, v in zip(theta, noise)]
    logliks = yield "spawn", [_loglik(c) for c in candidates]
    best = candidates[first_best([np.median(loglik / n) for loglik in logliks])]
    return clients.user_start(best.weights[0], best.theta[0])
