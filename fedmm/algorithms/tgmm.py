"""TGMM as the FedGrEM paper ran it (App. B), for comparison.

TGMM (Wang et al., 2021) is transfer learning for Gaussian mixtures: a target
task borrows from source tasks. The FedGrEM paper ran it "on each task with all
the other tasks as sources" with tuning parameter ``lambda = 0.4`` (App. B).
What fedmm implements, following the M-step in the FedGrEM authors' scripts:
every client runs EM from its aligned local-EM start, with its M-step for
``theta`` penalized towards the *initial* estimates of the other clients,

    theta_r = argmax Q-hat - lambda/(2 sigma_r^2) N_r sum_{f != k} ||theta_r - theta_r^{(f)[0]}||^2
            = (Sx_r + s N_r t_r) / (N_r (1 + s))      (Gaussian; s = lambda (K - 1),
                                                        t_r = mean of the others' starts)

i.e. a ridge towards the other clients' starting estimates (for regressions the
same penalty gives ``(A_r + s N_r I) theta_r = b_r + s N_r t_r``; the authors'
regression script ran plain gradient EM instead, which we take for a
placeholder). The sources are fixed: nothing is communicated after the start.
Mixing proportions and variances take their ordinary M-steps.
"""

import numpy as np

from ..families import MixtureParams
from ..protocol import Broadcast, Prior
from .. import _params as P
from ._base import Strategy
from .local import echo


class TGMM(Strategy):
    """TGMM with all other clients as sources (``method="tgmm"``).

    Parameters
    ----------
    penalty : float >= 0, default=0.4
        ``lambda``, the weight of each source (the paper's 0.4).
    """

    name = "tgmm"
    _parameter_constraints = {"penalty": P.real(0.0, np.inf, high_open=True)}
    per_client = False
    default_init = "local-em"
    ascent = False
    client_server = False
    local = True

    def __init__(self, penalty=0.4):
        self.penalty = penalty

    def server_start(self, family, start, n_k):
        """The sources, sent once: every client's prior is centred at the mean of the others' starts."""
        K = len(n_k)
        others = (start.theta.sum(axis=0) - start.theta) / max(K - 1, 1)
        return Broadcast(start, Prior(others, np.full(K, self.penalty * (K - 1)))), None

    def local_update(self, family, stats, state, n_k):
        prior = state.prior
        theta = family.penalized_m_step(stats, prior.target, prior.strength[:, None, None])
        return MixtureParams(stats.N / n_k[:, None], theta, family.update_scale(stats, theta))

    def server_step(self, messages, state, t):
        return echo(messages), state
