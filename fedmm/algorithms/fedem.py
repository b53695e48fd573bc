"""FedEM of Marfoq et al. (NeurIPS 2021), as the FedGrEM paper compares with it (Sec. 4.1).

Not the "Federated-EM" of Dieuleveut et al. (2021). Every round the server
broadcasts shared component parameters; each client runs the E-step, keeps its
own mixing proportions (Marfoq et al. eq. (9)), and solves its local M-step; the
server averages the clients' component parameters with weights ``n_k / n``
(Marfoq et al. Alg. 1 line 12, Alg. 2 line 18). Marfoq et al.'s local solver is
SGD on a neural network; for the mixtures here the local M-step is closed-form,
as in the FedGrEM paper's comparison. Variances, where estimated, are averaged
the same way.

No robustness: the average, weighted by the sizes the clients claim, goes where
one client's replies push it (``docs/threat-model.md``; ``fedmm.flower.fit``
warns).
"""

from typing import NamedTuple

import numpy as np

from ..families import MixtureParams
from ..protocol import Broadcast
from ._base import CLIENT_SERVER_CONSTRAINTS, CLIENT_SERVER_DOC, Strategy, em_update


class SharedComponents(NamedTuple):
    """The server's account of FedEM and the pooled methods: the one estimate every client shares.

    Attributes
    ----------
    center : ndarray of shape (R, p)
    """

    center: np.ndarray


class FedEM(Strategy):
    __doc__ = f"""FedEM (``method="fedem"``): shared components, local mixing proportions; no robustness.

    Parameters
    ----------
    {CLIENT_SERVER_DOC}
    """

    name = "fedem"
    _parameter_constraints = CLIENT_SERVER_CONSTRAINTS
    per_client = False
    shares_components = True
    default_init = "common"
    ascent = False

    def __init__(self, participation=1.0, dropout=0.0):
        self.participation = participation
        self.dropout = dropout

    def local_update(self, family, stats, state, n_k):
        return em_update(family, stats, n_k)

    def server_step(self, messages, state, t):
        share = (messages.n / messages.n.sum())[:, None, None]
        theta = np.broadcast_to((share * messages.theta).sum(axis=0), messages.theta.shape).copy()
        scale = np.broadcast_to((share * messages.scale).sum(axis=0), messages.scale.shape).copy()
        return Broadcast(MixtureParams(messages.weights, theta, scale)), SharedComponents(theta[0])

    def diagnostics(self, state):
        return state

    def center(self, diagnostics):
        return diagnostics.center
