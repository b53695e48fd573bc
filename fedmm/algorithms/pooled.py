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
from ..protocol import Broadcast, take
from ..robust import TRIM, kept_clients, trusted_sizes
from ._base import (CLIENT_SERVER_CONSTRAINTS, CLIENT_SERVER_DOC, GradientStrategy, PrivateForm, Strategy, em_update,
                    grem_update, step_sizes)
from .fedem import SharedComponents


class PooledState(NamedTuple):
    """The pooled server's state: the model, the shared estimate (clients of size one, the total ``n``),
    and the shared starting proportions (``w0``, for gradient step sizes)."""

    family: object
    params: MixtureParams
    w0: np.ndarray
    apart: np.ndarray | None = None


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

    def private(self, unit):
        """At the level of samples, its server needing only the clients' sums: every client takes the released
        proportions."""
        return PrivateForm(pooled=True) if unit == "sample" else None


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


def trimmed_loglik(loglik, n_k, trim):
    """``(kept, value)``: the clients left after leaving out the ``floor(trim K)`` with the lowest log-likelihood
    per sample, and the mean of their log-likelihoods per sample: the trimmed log-likelihood that
    :class:`TrimmedPooledEM` climbs and that scores its candidates. A mean of the clients' own, so that a
    claimed size weighs nothing in it."""
    per_sample = loglik / n_k
    kept = kept_clients(per_sample, trim)
    return kept, per_sample[kept].mean()


class TrimmedPooledEM(_Pooled):
    """The concentration steps of the trimmed pooled start (:func:`fedmm.initialization.trimmed_pooled_start`).

    EM with pooled components and every client's own mixing proportions (FedEM's model, and FedGrEM's at
    ``lambda = infinity``; FedEM eq. (9), FedGrEM Algorithm 1's ``w_r = N_r / n_k``), whose M-step sums the
    statistics of the clients the current fit explains best only: each round leaves out the ``floor(trim K)``
    clients with the lowest mean log-likelihood per sample (per sample, so that a large client is not trimmed
    for its size; the trimmed likelihood of Neykov et al., 2007, at the level of clients). With equal client
    sizes each round is a concentration step, so the trimmed log-likelihood never decreases (as in FAST-LTS).
    A kept client's sums count by its :func:`fedmm.robust.trusted_sizes`, as its pull on FedGrEM's centre does.
    The rounds stop once every client's log-likelihood settles, but for the clients trimmed and those that
    claim more samples than they are counted by (:meth:`may_keep_moving`): a party whose reports never
    settle cannot hold the start for ``max_iter`` rounds by lying about its size.

    A start, not a method of its own (it is not in :data:`fedmm.methods.METHODS`): the clients' side is pooled
    EM's, so it runs on every transport.
    """

    name = "trimmed-pooled-em"
    shared = False      # the proportions are each client's own
    ascent = False      # the trimmed likelihood climbs; the total need not

    def __init__(self, trim=TRIM):
        self.trim = trim

    def server_step(self, messages, state, t):
        keep, _ = trimmed_loglik(messages.loglik, messages.n, self.trim)
        trust = trusted_sizes(messages.n) / messages.n
        stats = take(messages.stats, keep)
        if (trust != 1.0).any():   # all 1 (every size trusted): the product would change nothing but copy
            stats = type(stats)(*(None if f is None else f * trust[keep].reshape((-1,) + (1,) * (f.ndim - 1))
                                  for f in stats))
        stats = pool_stats(stats)
        shared = em_update(state.family, stats, stats.N.sum(axis=1))
        params = shared.broadcast(len(messages.n))._replace(weights=messages.weights)
        apart = np.ones(len(trust), dtype=bool)               # trimmed,
        apart[keep] = trust[keep] < 1.0                       # or counted by fewer samples than claimed
        return Broadcast(params), state._replace(params=shared, apart=apart)

    def diagnostics(self, state):
        return state.apart

    def may_keep_moving(self, diagnostics, params, n_k):
        """The clients this round trimmed or counted by fewer samples than they claim."""
        return diagnostics
