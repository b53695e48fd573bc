"""Personalized decentralized gradient descent on a dynamic collaboration graph (``method="dynamic-graph"``).

The draft in ``../shared/papers`` (Sec. 3.1) minimizes
``1/n sum_i f_i(x_i) + rho/2 sum_{i<j} w_ij ||x_i - x_j||^2`` by gradient descent from a common start,
update (1)::

    x_i^{t+1} = x_i^t - eta (grad f_i(x_i^t) + rho sum_k w_ik^t (x_i^t - x_k^t)),

with the graph re-drawn every round, ``w_ik = 1{||x_i - x_k||^2 < alpha_t}``, ``alpha_t = O(1/t)``, so that
clients whose models drift apart stop pulling each other (its Lemma 3: the inclusion error
``alpha_t n (n - c)^2`` shrinks with ``alpha_t``; "we can stop decreasing alpha_t" once the clusters
separate). Here ``x_i`` is client ``i``'s component parameters and ``f_i`` its negative log-likelihood per
sample; fedmm's choices for the mixtures:

- ``eta grad f_i`` is the client's gradient M-step (FedGrEM Algorithm 1's client side,
  :func:`fedmm.algorithms._base.grem_update`), whose step ``C_eta / w_r`` makes ``eta = C_eta`` the size of
  the coupling step in the same units (a step of 1 is a full M-step); proportions and variances take their
  local maximizers, as in gradient EM;
- distances are in noise units (``theta / sigma_r``, as FedGrEM's central problem) and scaled by the
  sampling variance of the difference, ``d_ik^2 = sum_r ||theta_ir - theta_kr||^2 / (1/N_ir + 1/N_kr)``,
  about ``chi^2_{R p}`` for two clients with the same truth; ``alpha_t = max(threshold0 / t, threshold_min)``
  with ``threshold_min`` that chi-square's 99% quantile (the draft's floor "once the clusters separate") and
  ``threshold0 = 10 threshold_min`` by default;
- ``rho = (2 / C_eta - 1) / (1 + 2 max_i deg_i)`` by default, from the round's graph: with responsibilities
  fixed a round maps ``x`` to ``x + C_eta (x_hat - x) - C_eta rho L x`` (``x_hat`` the M-step, ``L`` the
  graph's Laplacian), which contracts iff ``C_eta (1 + rho lambda) < 2`` for every eigenvalue ``lambda`` of
  ``L``; ``lambda_max(L) <= 2 max deg`` makes the default safe, and a clique of ``c`` clients still pulls
  each member by ``rho c / (1 + rho c)``, about a third of the way to the clique's mean for ``C_eta = 1``.
"""

from typing import NamedTuple

import numpy as np
from scipy.stats import chi2

from .. import _params as P
from ..families import MixtureParams
from ..protocol import Broadcast
from ._base import GradientStrategy
from .variances import empty_components, noise_scale


class DynamicGraphState(NamedTuple):
    """The network: the model, the parameters the clients hold (``x^t``), and the last round's graph."""

    family: object
    params: MixtureParams
    graph: np.ndarray | None = None


def scaled_distances(theta, sigma, N):
    """``d_ik^2 = sum_r ||theta_ir - theta_kr||^2 / (1/N_ir + 1/N_kr)`` in noise units ``theta / sigma_r`` (K, K)."""
    z = theta / sigma
    diff2 = ((z[:, None] - z[None]) ** 2).sum(axis=-1)                             # (K, K, R)
    inv = 1.0 / np.maximum(N, 1e-12)
    return (diff2 / (inv[:, None] + inv[None])).sum(axis=-1)


class DynamicGraph(GradientStrategy):
    """The dynamic-graph method (``method="dynamic-graph"``).

    Parameters
    ----------
    C_eta, eta_rule
        Step sizes (:class:`~fedmm.algorithms._base.GradientStrategy`); ``C_eta`` is also ``eta`` of the coupling.
    coupling : float or None, default=None
        ``rho``, the pull towards the clients within the threshold; None: ``(2 / C_eta - 1) / (1 + 2 max_i
        deg_i)`` of each round's graph, the largest safe pull.
    threshold0, threshold_min : float or None, default=None
        ``alpha_t = max(threshold0 / t, threshold_min)`` on the scaled squared distances between clients
        (``docs/decentralized.md``); None: the 99% quantile of ``chi^2_{R p}`` for ``threshold_min`` and
        ten times it for ``threshold0``.
    """

    name = "dynamic-graph"
    _parameter_constraints = {**GradientStrategy._parameter_constraints,
                              "coupling": P.any_of(P.real(0.0, np.inf, low_open=True, high_open=True), P.none),
                              "threshold0": P.any_of(P.real(0.0, np.inf, low_open=True, high_open=True), P.none),
                              "threshold_min": P.any_of(P.real(0.0, np.inf, high_open=True), P.none)}
    per_client = False
    # The draft starts every client from one point (x_i^0 = x_bar^0); a mixture fitted to heterogeneous clients
    # pooled puts components where no group has them, and gradient steps do not recover (docs/decentralized.md).
    default_init = "local-em"
    stop_on = "parameter_change"
    ascent = False
    client_server = False

    def __init__(self, C_eta=1.0, eta_rule="safeguarded", coupling=None, threshold0=None, threshold_min=None):
        super().__init__(C_eta, eta_rule)
        self.coupling = coupling
        self.threshold0 = threshold0
        self.threshold_min = threshold_min

    def server_start(self, family, start, n_k):
        return Broadcast(start), DynamicGraphState(family, start)

    def thresholds(self, R, p):
        """``(threshold0, threshold_min)`` with the defaults filled in."""
        low = chi2.ppf(0.99, R * p) if self.threshold_min is None else self.threshold_min
        return (10.0 * low if self.threshold0 is None else self.threshold0), low

    def server_step(self, messages, state, t):
        """Update (1): each client's gradient step, minus the coupling to the clients within ``alpha_t``."""
        x = state.params.theta                                                          # x^t, (K, R, p)
        K, R, p = x.shape
        empty = empty_components(messages.n, messages.weights)
        sigma = noise_scale(state.family.coordinate_variances(messages.scale), empty)
        high, low = self.thresholds(R, p)
        d2 = scaled_distances(x, sigma, messages.n[:, None] * messages.weights)
        graph = (d2 < max(high / t, low)) & ~np.eye(K, dtype=bool)
        rho = (2.0 / self.C_eta - 1.0) / (1 + 2 * graph.sum(axis=1).max()) if self.coupling is None else self.coupling
        pull = graph.sum(axis=1)[:, None, None] * x - np.einsum("ik,k...->i...", graph.astype(float), x)
        params = MixtureParams(messages.weights, messages.theta - self.C_eta * rho * pull, messages.scale)
        return Broadcast(params), state._replace(params=params, graph=graph)

    def communication(self, messages, broadcast, state):
        """The graph is re-drawn from every pair's distance: each client sends its parameters, variances and
        effective sizes to every other, ``K (K - 1)`` messages."""
        K, R, p = messages.theta.shape
        per_message = R * p + messages.scale[0].size + R
        return {"messages": K * (K - 1), "floats": K * (K - 1) * per_message}

    def round_info(self, state):
        return {"edges": int(state.graph.sum()) // 2}

    def diagnostics(self, state):
        return state.graph

    def fitted_attributes(self, result, client_ids, n_k):
        """``collaboration_graph_`` (K, K) bool: who pulled whom in the last round."""
        return {"collaboration_graph_": result.diagnostics}
