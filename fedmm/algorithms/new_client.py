"""A client that joins after the fit, shrunk towards FedGrEM's consensus
(:meth:`fedmm.algorithms.fedgrem.FedGrEM.new_client`)."""

import numpy as np

from ..families import MixtureParams
from .central import soft_threshold

def shrunk_client(family, data, consensus, lam, max_iter=100, tol=1e-3):
    """One client's parameters shrunk towards a fixed consensus: the central problem (Algorithm 1; App. B.1,
    eq. (6)) for one more client, with the centre ``nu_bar`` held at the federation's.

    With the centre fixed, client ``k``'s part of the problem, ``min_nu (n/2) ||nu - theta_tilde||^2 + sqrt(n)
    lambda ||nu - nu_bar||`` per component, is solved by the group soft-threshold of its own estimate (the
    ``Delta_k`` step): ``nu = nu_bar + (theta_tilde - nu_bar) (1 - tau / ||theta_tilde - nu_bar||)_+``, in the noise
    units of the consensus's variances (:func:`fedmm.algorithms.variances.noise_scale`). Alternated with the
    client's E-step and M-step on its own rows until no parameter moves by ``tol``: FedGrEM's fixed point for that
    client, its own EM where it is far from the consensus, the consensus where it is near. The threshold is ``tau =
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
            nu = center + soft_threshold((own.theta - center) / sigma, threshold, family.central_metric(stats)) * sigma
        moved = np.abs(nu - params.theta).max()
        params = own._replace(theta=nu, scale=family.update_scale(stats, nu))
        if moved < tol:
            break
    return params
