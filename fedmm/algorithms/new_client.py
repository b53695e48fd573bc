"""A client that joins after the fit, shrunk towards FedGrEM's consensus
(:meth:`fedmm.algorithms.fedgrem.FedGrEM.new_client`)."""

import numpy as np

from ..families import MixtureParams
from .central import soft_threshold

#: The minimax concave penalty's ``gamma`` (:func:`group_mcp_threshold`): grpreg's and ncvreg's default (Breheny &
#: Huang 2015), which beat 2 and the soft threshold for new clients (``docs/research/groups.md``, "New clients").
GAMMA = 3.0


def shrunk_client(family, data, consensus, lam, max_iter=100, tol=1e-3, coordinates=None):
    """One client's parameters shrunk towards a fixed consensus: the central problem (Algorithm 1; App. B.1,
    eq. (6)) for one more client, with the centre ``nu_bar`` held at the federation's.

    With the centre fixed, client ``k``'s part of the problem, ``min_nu (n/2) ||nu - theta_tilde||^2 + sqrt(n)
    lambda ||nu - nu_bar||`` per component, is solved by the group soft-threshold of its own estimate (the
    ``Delta_k`` step): ``nu = nu_bar + (theta_tilde - nu_bar) (1 - tau / ||theta_tilde - nu_bar||)_+``, in the noise
    units of the consensus's variances (:func:`fedmm.algorithms.variances.noise_scale`). fedmm takes the group
    MCP threshold instead (:func:`group_mcp_threshold`, ``gamma = 3``): nothing pooled that the soft threshold
    keeps apart, but a component at least ``3 tau`` from the centre keeps its own estimate, where the soft
    threshold moved it ``tau`` towards the centre (clients 2 apart, 300 rows: 1.24 times the client's own EM's
    error, now 1.00; clients 0.5 apart: 0.87, now 0.84; ``docs/research/groups.md``, "New clients"). Alternated
    with the client's E-step and M-step on its own rows until no parameter moves by ``tol``: FedGrEM's fixed point
    for that client, its own EM where it is far from the consensus, the consensus where it is near. The threshold is ``tau =
    lambda / sqrt(n w_r R)``, at each component's own share of the client's rows (fedmm's; the fit's clients use
    ``n_k``, raised to ``n_k (w_r R)^2`` for a component above its equal share,
    :meth:`fedmm.algorithms.fedgrem.FedGrEM._blocks`): a component a few of a new client's rows hold is estimated
    from those few, and at ``n_k`` a client of 30 rows kept components it could not estimate
    (``docs/research/groups.md``, "New clients").

    Parameters
    ----------
    data : FederatedData
        The client's rows (one client).
    consensus : MixtureParams of one client
        The consensus components, their variances, and the client's proportions at them.
    lam : float
        The penalty ``lambda`` (the fit's last, ``history_["penalty"][-1]``).
    coordinates : callable, optional
        ``coordinates(u, N)``: the deviation ``u`` (1, R, p) in noise units thresholded coordinate by coordinate at the
        components' rows ``N`` (1, R), in place of the group MCP step (sparse FedGrEM's,
        :meth:`fedmm.algorithms.sparse.SparseFedGrEM.new_client`).
    """
    sigma = np.sqrt(family.coordinate_variances(consensus.scale))
    center, params = consensus.theta, consensus
    R = params.weights.shape[1]
    for _ in range(max_iter):
        stats = family.estep(data, params)[1]
        own = MixtureParams(stats.N / data.n_samples[:, None], *family.m_step(stats))
        share = own.weights * R
        threshold = lam / np.sqrt(data.n_samples[:, None] * share * np.maximum(share, 1.0))
        with np.errstate(divide="ignore", invalid="ignore"):     # an empty component: infinite threshold
            u = (own.theta - center) / sigma
            v = group_mcp_threshold(u, threshold, family.central_metric(stats)) if coordinates is None else \
                coordinates(u, stats.N)
            nu = center + v * sigma
        moved = np.abs(nu - params.theta).max()
        params = own._replace(theta=nu, scale=family.update_scale(stats, nu))
        if moved < tol:
            break
    return params


def group_mcp_threshold(u, threshold, metric=None, gamma=GAMMA):
    """The group thresholding rule of the minimax concave penalty (Zhang 2010; group MCP, Breheny & Huang 2015)
    of every ``u[k, r]`` at ``threshold[k, r]``, in the metric's norm: 0 within ``tau`` of the origin, ``u`` itself
    beyond ``gamma tau``, and between, ``gamma / (gamma - 1)`` times the soft threshold, ``u (1 - tau / ||u||)``;
    continuous. It is ``(gamma S(u, tau) - S(u, gamma tau)) / (gamma - 1)``, two group soft thresholds
    (:func:`fedmm.algorithms.central.soft_threshold`); ``gamma = 2`` is Gao & Bruce's firm threshold."""
    return (gamma * soft_threshold(u, threshold, metric) - soft_threshold(u, gamma * threshold, metric)) / (gamma - 1)
