"""FedGrEM's penalty chosen from the data: by Stein's unbiased risk estimate or by cross-validation.

How much FedGrEM pools is set by its penalty ``lambda_t``; the paper's
schedule (App. B.1: ``lambda_t = kappa lambda_{t-1} + C sqrt(p + log K)``,
``C = 2``) is calibrated for its design (``R = 5``, ``n_k = 150``). fedmm's
default, ``"sure-floored"``, chooses it every round by SURE (below), never
below the schedule.

``penalty="auto"`` asks the data how much to pool beyond that, without pooling
any: every client deals its samples at random into ``n_folds`` folds, from a
seed the server sends it (:func:`fedmm.robust.client_fold`), so it deals alone; each
fold is held out in turn while FedGrEM is fitted on the rest with each
candidate of :data:`PENALTY_CANDIDATES` (the default, its floor raised
fourfold, and full pooling: shared components, per-client proportions), from
the same starts; each client reports its mean held-out log-likelihood per
sample over the folds (one number per candidate); the server takes the
trimmed mean over clients, leaving out the ``trim`` fraction with the lowest
values so that outlier clients do not decide, and keeps the candidate that
pools least among those within one standard error of the best, paired over
clients (the one-standard-error rule). The final fit uses all data with the
chosen candidate. SURE sizes the penalty from the spread of the clients'
estimates, which a model's misfit widens (a diagonal Gaussian's local fit of
a class depends on which other classes the client holds); held-out
likelihood sees whether that spread predicts anything.

``penalty="sure"`` chooses ``lambda`` itself in every round, from what the
server already holds: the central update is a group soft-threshold of each
client's estimate towards the centre, whose mean squared error Stein's
unbiased risk estimate (SURE; Stein 1981) gives in closed form from the
estimates' distances to the centre and their sampling variances
(:func:`sure_risk`). The server keeps the ``lambda`` with the least total
estimated risk over the clients, leaving out the most heterogeneous
``trim`` fraction (:func:`sure_penalty`). No refits, no held-out data.
"""

import numpy as np

from ..robust import TRIM, client_seeds, fold_sizes, kept_clients, one_standard_error, trimmed_mean

__all__ = ["PENALTY_CANDIDATES", "N_FOLDS", "SURE_GRID", "select_penalty", "sure_risk",
           "sure_grid_risk", "noise_ratios", "alike_clients", "sure_penalty"]

#: Candidates of ``penalty="auto"`` (FedGrEM's options for each), from less pooling to more: the default;
#: the default with its floor at four times the paper's schedule (``C = 8``), which pools every client within
#: a wide threshold while an outlier client farther out stays apart (on the paper's GMM design at ``h = 0``
#: it still does, ``C = 16`` does not); and full pooling, every client on the consensus.
PENALTY_CANDIDATES = ({"penalty": "sure-floored"}, {"penalty": "sure-floored", "penalty_params": {"C": 8.0}},
                      {"penalty": np.inf})


#: Folds of every client's samples when FedGrEM's penalty is tuned (``penalty="auto"``): each holds out 20%.
N_FOLDS = 5


#: Candidate ``lambda`` of ``penalty="sure"``: 10 per decade, from pooling almost nothing to almost everything
#: (thresholds of 0.01 to 100 noise standard deviations per square root of a client's size).
SURE_GRID = np.geomspace(1e-2, 1e2, 41)


def select_penalty(fit, clients, candidates, n_folds, trim, random_state):
    """The penalty of ``candidates`` chosen by trimmed cross-validated log-likelihood and the
    one-standard-error rule.

    Parameters
    ----------
    fit : callable
        ``fit(train, candidates) -> [MixtureParams, ...]``: FedGrEM with each candidate's options, from
        the same starts, on ``train``, a transport of the clients' training rows.
    clients : transport of clients (:mod:`fedmm.clients`, :mod:`fedmm.flower`)
        All clients, their data in standard units with the design applied. They deal their rows into
        folds from seeds the server draws (:meth:`deal_folds`, :func:`fedmm.robust.client_fold`), give a transport of
        the rows outside a fold (:meth:`training`), and score a fold's rows (:meth:`held_out_loglik`):
        rows never leave a client.
    candidates : sequence of dict
        FedGrEM's options (``penalty``, ``penalty_params``), from less pooling to more
        (:data:`PENALTY_CANDIDATES`).
    n_folds : int
        Each fold is held out once while the candidates are fitted on the rest.
    trim : float
        The fraction of clients left out of the mean.
    random_state : RandomState

    Returns
    -------
    best : dict
        The candidate chosen by :func:`one_standard_error`.
    table : dict
        ``"chosen"``: ``best``; ``"candidates"``; ``"score"``: trimmed mean over clients
        of the held-out log-likelihood per sample for each; ``"client_scores"``: (len(candidates), K'),
        every client's mean over its held-out samples (the K' clients with two samples or more).
    """
    n_samples = clients.n_samples
    clients.deal_folds(n_folds, client_seeds(random_state, clients.n_clients))
    total = np.zeros((len(candidates), clients.n_clients))
    for fold in range(n_folds):
        if not fold_sizes(n_samples, n_folds, fold).any():  # more folds than any client has samples
            continue
        for c, params in enumerate(fit(clients.training(fold), candidates)):
            total[c] += clients.held_out_loglik(fold, params)
    held_out = n_samples > 1
    client_scores = total[:, held_out] / n_samples[held_out]
    scores = np.array([trimmed_mean(s, trim) for s in client_scores])
    best = candidates[one_standard_error(client_scores, trim)]
    return best, {"candidates": list(candidates), "score": scores, "client_scores": client_scores, "chosen": best}


def sure_risk(distance, threshold, variance, p):
    """Stein's unbiased estimate of the squared error of the group soft-threshold, per block.

    The central update (FedGrEM eq. (6), :mod:`fedmm.algorithms.central`) returns
    ``nu = c + (1 - t / D)_+ (theta - c)`` for an estimate ``theta ~ N(mu, v I_p)``
    at distance ``D = ||theta - c||`` from the centre ``c`` (held fixed),
    threshold ``t``. Writing ``nu = theta - g(theta)`` with
    ``g = min(1, t / D) (theta - c)``, SURE (Stein 1981, Thm. 1) is
    ``p v + ||g||^2 - 2 v div g``, where ``||g|| = min(D, t)`` and
    ``div g = p`` when pooled (``D <= t``), ``(p - 1) t / D`` otherwise (the
    divergence of the group soft-threshold; Yuan & Lin 2006, Sec. 2.3):

        SURE = p v + min(D, t)^2 - 2 v [p 1(D <= t) + (p - 1) (t / D) 1(D > t)]

    Its expectation is ``E ||nu - mu||^2`` exactly.

    Parameters
    ----------
    distance, threshold, variance : ndarray, broadcastable
        ``D``, ``t`` and the per-coordinate sampling variance ``v`` of ``theta``.
    p : int
        Dimension of each block.
    """
    inside = distance <= threshold
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):   # t / D is used only where D > t
        divergence = np.where(inside, p, (p - 1) * threshold / distance)
    return p * variance + np.minimum(distance, threshold) ** 2 - 2.0 * variance * divergence


def sure_grid_risk(distance, root, variance, p, grid):
    """``sum_b sure_risk(D_b, lambda / root_b, v_b, p)`` for every ``lambda`` of ``grid``, without a pass per ``lambda``.

    A block is pooled once ``lambda >= D_b root_b``, and :func:`sure_risk` is then
    the constant ``p v + D^2 - 2 v p``; below, ``p v + lambda^2 / root^2 - 2 v (p - 1) lambda / (root D)``,
    a quadratic in ``lambda``. Each block's terms are summed into the bin of the grid where it
    becomes pooled; cumulative sums over the bins give every ``lambda``'s total
    (``O(B log G)``; summing ``sure_risk`` for each ``lambda`` took twice a central update's time
    at ``K = 10,000`` clients).

    Parameters
    ----------
    distance, root, variance : ndarray of shape (B,)
        Each block's ``D``, root size (threshold ``lambda / root``) and sampling variance ``v``.
    p : int
    grid : ndarray of shape (G,)
        Increasing, positive.
    """
    G = len(grid)
    pooled_from = np.searchsorted(grid, distance * root)  # the block is pooled at grid[g] for g >= pooled_from

    def binned(x):
        return np.bincount(pooled_from, weights=x, minlength=G + 1)

    def pooled(x):    # sum over the blocks pooled at each grid[g]
        return np.cumsum(binned(x))[:G]

    def unpooled(x):  # and over the others
        return np.cumsum(binned(x)[::-1])[::-1][1:]

    # D = 0, or so small that the ratio overflows: pooled at every grid[g] (pooled_from = 0), where the
    # unpooled sums leave it out.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        linear = np.where(distance > 0, 2.0 * variance * (p - 1) / (root * distance), 0.0)
    return (pooled(p * variance + distance ** 2 - 2.0 * variance * p) + unpooled(p * variance)
            + grid ** 2 * unpooled(1.0 / root ** 2) - grid * unpooled(linear))


def noise_ratios(distance, N, p):
    """Each block's squared distance to the centre per coordinate in units of its noise, ``N_kr d_kr^2 / p``
    (distances in noise units: about ``chi2_p / p``, mean 1, for a block that differs from the centre by its
    noise alone), and which blocks count: ``(ratio, counted)``, ``ratio`` 0 where a block does not count.

    A block counts where ``N_kr >= 1``, a sample's worth: a nearly empty component hardly moves from where it
    was put, and its noise ``1 / N_kr`` would decide what the clients' distances say (:func:`sure_penalty`,
    :func:`fedmm.algorithms.central.between_variance`).
    """
    counted = N >= 1.0
    return np.where(counted, N * distance ** 2 / p, 0.0), counted


def alike_clients(distance, N, p, trim):
    """The clients kept where the clients' distances to the centre vote on one number for all components
    (:func:`sure_penalty`): all but the ``floor(trim K)`` with the largest mean :func:`noise_ratios` over
    their counted blocks, so that outlier clients do not decide for the others (:func:`kept_clients`)."""
    ratio, counted = noise_ratios(distance, N, p)
    return kept_clients(-ratio.sum(axis=1) / np.maximum(counted.sum(axis=1), 1), trim)


def sure_penalty(distance, sizes, N, p, grid=SURE_GRID, trim=TRIM):
    """The ``lambda`` of ``grid`` whose central update has the least estimated squared error (``penalty="sure"``).

    In FedGrEM's noise units (:func:`fedmm.algorithms.fedgrem.noise_scale`) a
    client's step to its M-step solution makes ``theta_tilde_kr`` an estimate
    with per-coordinate variance ``v_kr = 1 / N_kr`` (``N_kr = n_k w_kr``; in
    the design metric for regressions), and the threshold is
    ``lambda / sqrt(sizes)``. Summed over the blocks (clients' components),
    :func:`sure_risk` estimates the whole update's squared error
    ``sum_kr E ||nu_kr - mu_kr||^2``: small ``lambda`` keeps the noise of every
    local estimate, large ``lambda`` the clients' differences, and the choice
    adapts to the unknown similarity ``h``. Only the blocks that count
    (:func:`noise_ratios`) of the clients :func:`alike_clients` keeps enter: a
    nearly empty component (its gradient step, by ``C_eta w_hat / w_hat^{[0]}``
    of the way, hardly moves it, and at the fixed point its threshold is as many
    times larger: it pools whatever ``lambda``) would decide by its ``1 / N_kr``,
    and outlier clients, whose risk only grows with ``lambda``, would decide how
    much the others pool.

    The variance assumes the step reaches the M-step (``C_eta w_hat`` = 1, the
    default ``C_eta`` while weights do not fall below their start).

    Parameters
    ----------
    distance : ndarray of shape (K, R)
        ``||theta_tilde_kr - nu_bar_r||`` in noise units, to a centre (a pilot central update's).
    sizes : ndarray of shape (K,) or (K, R)
        The central problem's sizes (threshold ``lambda / sqrt(sizes)``).
    N : ndarray of shape (K, R)
        Soft counts of the clients' components.
    p : int
        Parameters per component.
    grid : sequence of float
    trim : float

    Returns
    -------
    float
        The chosen ``lambda``; the largest of ``grid`` (pool everything) when no kept block has
        ``N_kr >= 1``.
    """
    grid = np.asarray(grid, dtype=float)
    (_, valid), kept = noise_ratios(distance, N, p), alike_clients(distance, N, p, trim)
    v = 1.0 / np.where(valid, N, 1.0)
    if not valid[kept].any():
        return float(grid[-1])
    # Left-out blocks get a stand-in size: an empty component's size is 0 under per-component sizes.
    root = np.sqrt(np.where(valid, np.broadcast_to(np.reshape(sizes, (len(N), -1)), N.shape), 1.0))
    blocks = np.zeros(valid.shape, dtype=bool)
    blocks[kept] = valid[kept]
    risk = sure_grid_risk(distance[blocks], root[blocks], v[blocks], p, grid)
    return float(grid[np.argmin(risk)])
