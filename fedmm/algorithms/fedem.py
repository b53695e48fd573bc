"""FedEM of Marfoq et al. (NeurIPS 2021), as the FedGrEM paper compares with it (Sec. 4.1).

Not the "Federated-EM" of Dieuleveut et al. (2021). Every round the server
broadcasts shared component parameters; each client runs the E-step, keeps its
own mixing proportions (Marfoq et al. eq. (9)), and solves its local M-step; the
server averages the clients' component parameters with weights ``n_k / n``
(Marfoq et al. Alg. 1 line 12, Alg. 2 line 18). Marfoq et al.'s local solver is
SGD on a neural network; for the mixtures here the local M-step is closed-form,
as in the FedGrEM paper's comparison. Variances, where estimated, are averaged
the same way.
"""

import numpy as np

from ..families import MixtureParams
from ._base import Algorithm, em_update


class FedEM(Algorithm):
    """FedEM (``method="fedem"``): shared components, local mixing proportions."""

    per_client = False
    shares_components = True
    default_init = "common"
    ascent = False

    def step(self, family, stats, params, n_k):
        local = em_update(family, stats, n_k)                                     # client side
        share = (n_k / n_k.sum())[:, None, None]                                  # server side
        theta = np.broadcast_to((share * local.theta).sum(axis=0), local.theta.shape).copy()
        scale = np.broadcast_to((share * local.scale).sum(axis=0), local.scale.shape).copy()
        self.center = theta[0]
        return MixtureParams(local.weights, theta, scale)

    def final_state(self):
        return {"center": self.center}
