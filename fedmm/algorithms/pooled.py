"""Pooled baselines: EM and gradient EM on all clients' data as one sample (FedGrEM Sec. 4.1).

Each client sends its responsibility-weighted sums; the server adds them and
takes the M-step (or gradient step) once. Because the sums add up to the
pooled data's sums, this is exactly EM on the pooled data, without moving a
sample. Every client then holds the same parameters, mixing proportions
included: the right model only when all clients are alike. No robustness: one
client's sums move everyone's estimate (``docs/threat-model.md``).
"""

from typing import NamedTuple

import numpy as np

from ..families import MixtureParams, pool_stats
from ..protocol import Broadcast
from ._base import (CLIENT_SERVER_CONSTRAINTS, CLIENT_SERVER_DOC, GradientStrategy, Strategy, em_update, grem_update,
                    step_sizes)
from .fedem import SharedComponents


class PooledState(NamedTuple):
    """The pooled server's state: the model, the shared estimate (clients of size one, the total ``n``),
    and the shared starting proportions (``w0``, for gradient step sizes)."""

    family: object
    params: MixtureParams
    w0: np.ndarray


class _Pooled(Strategy):
    per_client = False
    shared = True
    shares_components = True
    sends_stats = True

    def local_update(self, family, stats, state, n_k):
        # The clients' part is their statistics; the parameters are the server's.
        return state.params._replace(weights=stats.N / n_k[:, None])

    def server_start(self, family, start, n_k):
        shared = start.take([0])
        return Broadcast(start), PooledState(family, shared, np.maximum(shared.weights, 1.0 / n_k.sum()))

    def server_step(self, messages, state, t):
        stats, n = pool_stats(messages.stats), messages.n.sum(keepdims=True)
        params = self._update(state, stats, n)
        return Broadcast(params.broadcast(len(messages.n))), state._replace(params=params)

    def diagnostics(self, state):
        return SharedComponents(state.params.theta[0])

    def center(self, diagnostics):
        return diagnostics.center


class PooledEM(_Pooled):
    __doc__ = f"""EM on the pooled data (``method="pooled-em"``): no robustness, one model for every client.

    Parameters
    ----------
    {CLIENT_SERVER_DOC}
    """

    name = "pooled-em"
    _parameter_constraints = CLIENT_SERVER_CONSTRAINTS

    def __init__(self, participation=1.0, dropout=0.0):
        self.participation = participation
        self.dropout = dropout

    def _update(self, state, stats, n):
        return em_update(state.family, stats, n)


class PooledGrEM(_Pooled, GradientStrategy):
    __doc__ = f"""Gradient EM on the pooled data (``method="pooled-grem"``).

    Parameters
    ----------
    {GradientStrategy.__doc__.split("----------")[1].strip()}
    {CLIENT_SERVER_DOC}
    """

    name = "pooled-grem"
    _parameter_constraints = {**GradientStrategy._parameter_constraints, **CLIENT_SERVER_CONSTRAINTS}

    def __init__(self, C_eta=1.0, eta_rule="safeguarded", participation=1.0, dropout=0.0):
        super().__init__(C_eta, eta_rule)
        self.participation = participation
        self.dropout = dropout

    def _update(self, state, stats, n):
        eta = step_sizes(state.w0, stats, n, self.C_eta, self.eta_rule)
        return grem_update(state.family, stats, state.params, eta, n)
