"""FedEM of Marfoq et al. (NeurIPS 2021), as the FedGrEM paper compares with it (Sec. 4.1).

Not the "Federated-EM" of Dieuleveut et al. (2021). Every round the server
broadcasts shared component parameters; each client runs the E-step, keeps its
own mixing proportions (Marfoq et al. eq. (9)), and solves its local M-step; the
server averages the clients' component parameters. Marfoq et al.'s local solver
is SGD on a neural network; for the mixtures here the local M-step is
closed-form, as in the FedGrEM paper's comparison. Variances, where estimated,
are averaged the same way.

The paper weights client ``k`` by ``n_k / n`` (Marfoq et al. Alg. 1 line 12,
Alg. 2 line 18: ``aggregation="samples"``). That average is not the M-step of
FedEM's own model: a client's mean for a component it barely holds enters at
full weight, and the fixed point is off the maximum likelihood (issue 59: 0.13 to
0.21 against pooled EM's 0.04 on ``validation/fedem_optimum.py``). The default,
``aggregation="components"``, weights component ``r`` of client ``k`` by the
samples its M-step stands for, ``N_kr = n_k w_kr``: the M-step of the model's
complete-data log-likelihood (Marfoq et al. eq. (10), shared components) summed
over clients, so the means are exactly the pooled sums' M-step
(``sum_k N_kr mu_kr / sum_k N_kr = sum_k Sx_kr / sum_k N_kr``, FedGrEM App. E.2);
variances are the within-client ones so weighted.

No robustness: the average, weighted by the sizes the clients claim, goes where
one client's replies push it (``docs/threat-model.md``; ``fedmm.flower.fit``
warns).
"""

from typing import NamedTuple

import numpy as np

from .. import _params as P
from ..families import MixtureParams
from ..protocol import Broadcast
from ._base import CLIENT_SERVER_CONSTRAINTS, CLIENT_SERVER_DOC, PrivateForm, Strategy, em_update

#: What a component's mass ``w_kr`` is taken as at least in ``aggregation="components"`` (as scikit-learn's
#: ``10 * eps`` in its M-step).
_TINY = 10 * np.finfo(float).eps


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
    aggregation : {{"components", "samples"}}, default="components"
        How the server weights client ``k``'s component ``r``: by ``N_kr = n_k w_kr``, the samples its
        M-step stands for (the means are then pooled EM's M-step of FedEM's model), or by ``n_k / n``, as
        Marfoq et al. (Alg. 1 line 12). ``aggregation="samples"`` with ``init="common"`` is the paper's
        algorithm as fedmm ran it before issue 59.
    {CLIENT_SERVER_DOC}
    """

    name = "fedem"
    _parameter_constraints = {"aggregation": P.one_of("components", "samples"), **CLIENT_SERVER_CONSTRAINTS}
    per_client = False
    shares_components = True
    default_init = "family"
    ascent = False

    def __init__(self, aggregation="components", participation=1.0, dropout=0.0):
        self.aggregation = aggregation
        self.participation = participation
        self.dropout = dropout

    def local_update(self, family, stats, state, n_k):
        return em_update(family, stats, n_k)

    def server_step(self, messages, state, t):
        if self.aggregation == "components":
            # N_kr = n_k w_kr (FedGrEM Algorithm 1's w_r = N_r / n_k); a component no client holds falls back
            # to the paper's n_k / n.
            mass = messages.n[:, None] * (messages.weights + _TINY)
        else:
            mass = np.broadcast_to(messages.n[:, None], messages.weights.shape)   # Marfoq et al. Alg. 1 line 12
        share = (mass / mass.sum(axis=0))[:, :, None]
        theta = np.broadcast_to((share * messages.theta).sum(axis=0), messages.theta.shape).copy()
        scale = np.broadcast_to((share * messages.scale).sum(axis=0), messages.scale.shape).copy()
        return Broadcast(MixtureParams(messages.weights, theta, scale)), SharedComponents(theta[0])

    def diagnostics(self, state):
        return state

    def center(self, diagnostics):
        return diagnostics.center

    def private(self, unit):
        """At either level: the server averages the clients' noisy updates under local noise, and every client
        keeps its own proportions."""
        return PrivateForm()
