"""The shape every estimation strategy shares: start, rounds, stop.

A round is one E-step on every client (batched through the kernels) followed
by the strategy's ``step``: client-side M-step or gradient step, and whatever
the server does with the clients' messages. The loop, the stopping rule and
the divergence check live here once.
"""

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

from ..families import MixtureParams

__all__ = ["Algorithm", "DivergenceError", "FitResult", "run_rounds", "fit_restarts", "em_update",
           "grem_update", "step_sizes"]


class DivergenceError(RuntimeError):
    """An estimation run produced non-finite parameters or log-likelihood."""


class FitResult(NamedTuple):
    params: MixtureParams
    n_iter: int
    converged: bool
    history: np.ndarray  # mean log-likelihood per sample over all clients, one entry per round
    loglik: np.ndarray   # (K,) each client's log-likelihood at the returned parameters
    start: int = 0       # fit_restarts: the start with the best total log-likelihood


def em_update(family, stats, n_k):
    """Full local M-step: ``w_r = N_r / n_k`` (FedGrEM Algorithm 1) and the family's maximizer of Q-hat."""
    theta, scale = family.m_step(stats)
    return MixtureParams(stats.N / n_k[:, None], theta, scale)


def grem_update(family, stats, params, eta, n_k):
    """Gradient M-step of FedGrEM Algorithm 1: ``w_r = N_r / n_k``, ``theta += eta * grad Q-hat``.

    Variances, where the family estimates them, take their closed-form
    maximizer at the new ``theta``.
    """
    theta = family.gradient_step(stats, params, eta, n_k)
    return MixtureParams(stats.N / n_k[:, None], theta, family.update_scale(stats, theta))


def step_sizes(weights, n_k, C_eta):
    """``eta_r^{(k)} = C_eta / w_hat_r^{(k)[0]}`` (FedGrEM App. A.1 Cor. A.12, App. B.1).

    Initial weights are floored at ``1 / n_k`` (one sample's worth) so that an
    empty starting component cannot give an infinite step.
    """
    return C_eta / np.maximum(weights, 1.0 / n_k[:, None])


class Algorithm(ABC):
    """An estimation strategy.

    Attributes
    ----------
    per_client : bool
        True when each client's mixture is estimated from that client's data
        alone: restarts are compared per client, and every client needs at
        least ``n_components`` samples.
    shared : bool
        True when all clients end with one common estimate (pooled methods).
    default_init : str
        The start ``init="auto"`` means (see :mod:`fedmm.initialization`).
    """

    per_client = True
    shared = False
    default_init = "family"

    def __init__(self, C_eta=1.0):
        self.C_eta = C_eta

    def start(self, params, n_k):
        """Fix per-run quantities from the starting point (the gradient step sizes)."""
        self.eta = step_sizes(params.weights, n_k, self.C_eta)

    @abstractmethod
    def step(self, family, stats, params, n_k):
        """One round after the E-step: new parameters of every client."""


def run_rounds(algorithm, family, data, params, max_iter, tol):
    """Iterate E-step + ``algorithm.step`` from ``params``.

    Stops when no client's mean log-likelihood per sample changed by ``tol`` or
    more in a round (scikit-learn's rule, applied client by client), or after
    ``max_iter`` rounds.

    Raises
    ------
    DivergenceError
        Naming the clients whose parameters or log-likelihood became non-finite.
    """
    n_k = data.n_samples
    algorithm.start(params, n_k)
    history = []
    previous = None
    converged = False
    # Overflow on the way to a divergence is reported once, by _check_finite, not as numpy warnings.
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(1, max_iter + 1):
            loglik, stats = family.estep(data, params)
            params = algorithm.step(family, stats, params, n_k)
            _check_finite(params, loglik, t)
            mean_ll = loglik / n_k
            history.append(loglik.sum() / n_k.sum())
            if previous is not None and np.max(np.abs(mean_ll - previous)) < tol:
                converged = True
                break
            previous = mean_ll
        loglik, _ = family.estep(data, params)
    _check_finite(params, loglik, t)
    return FitResult(params, t, converged, np.asarray(history), loglik)


def fit_restarts(algorithm, family, data, starts, max_iter, tol):
    """Run from every start and keep the best log-likelihood.

    Per-client strategies fit independent problems, so each client keeps its
    own best start; the others keep the start with the best total.
    ``n_iter`` and ``converged`` describe the runs that were kept; ``history``
    is that of the run with the best total.
    """
    runs = [run_rounds(algorithm, family, data, start, max_iter, tol) for start in starts]
    loglik = np.stack([run.loglik for run in runs])                 # (n_starts, K)
    best_total = int(np.argmax(loglik.sum(axis=1)))
    K = data.n_clients
    choice = np.argmax(loglik, axis=0) if algorithm.per_client else np.full(K, best_total)
    clients = np.arange(K)
    params = MixtureParams(*(np.stack(field)[choice, clients] for field in zip(*(r.params for r in runs))))
    kept = [runs[i] for i in np.unique(choice)]
    return FitResult(params, max(r.n_iter for r in kept), all(r.converged for r in kept),
                     runs[best_total].history, loglik[choice, clients], best_total)


def _check_finite(params, loglik, t):
    bad = np.flatnonzero(~(params.is_finite() & np.isfinite(loglik)))
    if bad.size:
        raise DivergenceError(
            f"The run diverged in round {t}: client(s) {bad[:10].tolist()} have non-finite parameters "
            "or log-likelihood. For gradient methods lower C_eta (the paper's stable range is "
            "0.55 to 1.35); otherwise check those clients' data for extreme scales.")
