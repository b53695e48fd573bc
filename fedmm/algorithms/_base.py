"""The shape every estimation strategy shares: start, rounds, stop.

A round is one E-step on every client (batched through the kernels) followed
by the strategy's ``step``: client-side M-step or gradient step, and whatever
the server does with the clients' messages. The loop, the stopping rule and
the divergence check live here once.
"""

import warnings
from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..families import MixtureParams

__all__ = ["Algorithm", "DivergenceError", "FitResult", "run_rounds", "fit_restarts", "fit_weights", "em_update",
           "grem_update", "step_sizes", "ETA_RULES"]


class DivergenceError(RuntimeError):
    """An estimation run produced non-finite parameters or log-likelihood."""


class FitResult(NamedTuple):
    params: MixtureParams
    n_iter: int
    converged: bool
    history: dict        # per-round records: name -> array of length n_iter
    loglik: np.ndarray   # (K,) each client's log-likelihood at the returned parameters
    state: dict          # the algorithm's final server-side state (e.g. FedGrEM's centre)
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


ETA_RULES = ("safeguarded", "initial")


def step_sizes(w0, stats, n_k, C_eta, rule):
    """Gradient step sizes ``eta_r^{(k)}`` of one round.

    ``"initial"``: ``C_eta / w_hat_r^{(k)[0]}``, fixed at the start (FedGrEM
    App. A.1 Cor. A.12, App. B.1). ``"safeguarded"`` (default):
    ``C_eta / max(w_hat^{[0]}, w_hat^{[t]})`` with ``w_hat^{[t]} = N_r / n_k`` of
    this round's E-step. The fixed rule stands in for ``1 / w*`` (Assumption
    A.9 (v): ``eta <= 1 / w*``) and fails when a component's weight grows far
    beyond its start: once ``eta w_hat^{[t]} > 2`` the step overshoots and the
    component oscillates for ever (seen on the paper's own design, from a start
    with a nearly empty component). The safeguard equals the paper's rule
    while weights do not grow and keeps ``eta w_hat^{[t]} <= C_eta``: for
    ``C_eta <= 1`` every step moves ``theta`` towards the M-step solution
    and increases Q-hat, as a generalized EM step.

    ``w0`` are the starting weights, floored at ``1 / n_k`` (one sample's worth)
    so an empty starting component cannot give an infinite step.
    """
    if rule == "initial":
        return C_eta / w0
    return C_eta / np.maximum(w0, stats.N / n_k[:, None])


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
    shares_components : bool
        True when all clients end with the same component parameters (pooled
        methods, FedEM); the count of parameters (BIC, AIC) depends on it.
    default_init : str
        The start ``init="auto"`` means (see :mod:`fedmm.initialization`).
    """

    per_client = True
    shared = False
    shares_components = False
    default_init = "family"
    #: What ``tol`` is compared with: the change of mean log-likelihood per sample
    #: ("log_likelihood", scikit-learn's rule) or of the parameters ("parameter_change").
    stop_on = "log_likelihood"
    #: Whether no round should lower the log-likelihood (EM and gradient EM with a contracting step are
    #: generalized EM algorithms); FedEM, TGMM and FedGrEM trade likelihood for agreement between clients.
    ascent = True

    def __init__(self, C_eta=1.0, eta_rule="safeguarded"):
        if eta_rule not in ETA_RULES:
            raise ValueError(f"eta_rule must be one of {ETA_RULES}, got {eta_rule!r}.")
        self.C_eta = C_eta
        self.eta_rule = eta_rule

    def run(self, family, data, start, max_iter, tol):
        """Fit from one start (a strategy may wrap the rounds, e.g. to restart some clients)."""
        return run_rounds(self, family, data, start, max_iter, tol)

    def round_info(self):
        """Scalars recorded in ``history`` after every round, beyond the common ones."""
        return {}

    def final_state(self):
        """Server-side state worth reporting once the rounds end."""
        return {}

    def start(self, params, n_k):
        """Fix per-run quantities from the starting point (the weights the step sizes use)."""
        self.w0 = np.maximum(params.weights, 1.0 / n_k[:, None])

    def step_sizes(self, stats, n_k, w0=None):
        """This round's gradient step sizes (:func:`step_sizes`)."""
        return step_sizes(self.w0 if w0 is None else w0, stats, n_k, self.C_eta, self.eta_rule)

    @abstractmethod
    def step(self, family, stats, params, n_k):
        """One round after the E-step: new parameters of every client."""


def run_rounds(algorithm, family, data, params, max_iter, tol):
    """Iterate E-step + ``algorithm.step`` from ``params``.

    Stops after ``max_iter`` rounds or when the quantity named by
    ``algorithm.stop_on`` changed by less than ``tol`` in a round: no client's
    mean log-likelihood per sample (scikit-learn's rule, client by client),
    or no weight or parameter coordinate of any client.

    A run of an ascent algorithm that ends with a lower total log-likelihood
    than its start draws a :class:`sklearn.exceptions.ConvergenceWarning`.

    Raises
    ------
    DivergenceError
        Naming the clients whose parameters or log-likelihood became
        non-finite, or whose parameters left every plausible range (1e8 times
        the size of the data they were fitted on).
    """
    n_k = data.n_samples
    algorithm.start(params, n_k)
    history = []
    previous = None
    converged = False
    bound = 1e8 * (1.0 + np.abs(data.X).max() + (0.0 if data.y is None else np.abs(data.y).max()))
    # Overflow on the way to a divergence is reported once, by _check_finite, not as numpy warnings.
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(1, max_iter + 1):
            loglik, stats = family.estep(data, params)
            if t == 1:
                start_loglik = loglik
            new = algorithm.step(family, stats, params, n_k)
            _check_finite(new, loglik, t, bound)
            mean_ll = loglik / n_k
            change = max(np.abs(new.theta - params.theta).max(), np.abs(new.weights - params.weights).max())
            history.append({"log_likelihood": loglik.sum() / n_k.sum(), "parameter_change": change,
                            **algorithm.round_info()})
            params = new
            if algorithm.stop_on == "parameter_change":
                done = change < tol
            else:
                done = previous is not None and np.max(np.abs(mean_ll - previous)) < tol
            if done:
                converged = True
                break
            previous = mean_ll
        loglik, _ = family.estep(data, params)
    _check_finite(params, loglik, t, bound)
    if algorithm.ascent:
        _check_progress(algorithm, start_loglik.sum(), loglik.sum())
    records = {key: np.array([h[key] for h in history]) for key in history[0]}
    return FitResult(params, t, converged, records, loglik, algorithm.final_state())


def _check_progress(algorithm, before, after):
    """Warn when a run ends with a lower log-likelihood than it started with (beyond round-off)."""
    if after < before - 1e-6 * (1.0 + abs(before)):
        warnings.warn(f"{type(algorithm).__name__} ended with a lower objective, the log-likelihood ({after:.6g}), than its start "
                      f"({before:.6g}): its steps did not climb. For gradient methods lower C_eta (a step "
                      "contracts for C_eta < 2); otherwise check the data for clients far from the others.",
                      ConvergenceWarning, stacklevel=4)


def fit_restarts(algorithm, family, data, starts, max_iter, tol):
    """Run from every start and keep the best log-likelihood.

    Per-client strategies fit independent problems, so each client keeps its
    own best start; the others keep the start with the best total.
    ``n_iter`` and ``converged`` describe the runs that were kept; ``history``
    and ``state`` are those of the run with the best total.
    """
    runs = [algorithm.run(family, data, start, max_iter, tol) for start in starts]
    loglik = np.stack([run.loglik for run in runs])                 # (n_starts, K)
    best_total = int(np.argmax(loglik.sum(axis=1)))
    K = data.n_clients
    choice = np.argmax(loglik, axis=0) if algorithm.per_client else np.full(K, best_total)
    clients = np.arange(K)
    params = MixtureParams(*(np.stack(field)[choice, clients] for field in zip(*(r.params for r in runs))))
    kept = [runs[i] for i in np.unique(choice)]
    return FitResult(params, max(r.n_iter for r in kept), all(r.converged for r in kept),
                     runs[best_total].history, loglik[choice, clients], runs[best_total].state, best_total)


def fit_weights(family, data, params, clients=None, max_iter=100, tol=1e-3):
    """EM on the mixing proportions only, the components fixed (FedEM Sec. 2.2 / 3.2).

    Updates ``w = N / n_k`` for the clients in ``clients`` (a boolean mask;
    all by default) until no client's mean log-likelihood per sample changes by
    ``tol``. Used to personalize a new client, and to give a client restarted
    from the consensus proportions that fit its data.
    """
    n_k = data.n_samples
    clients = np.ones(data.n_clients, dtype=bool) if clients is None else clients
    previous = None
    for _ in range(max_iter):
        loglik, stats = family.estep(data, params)
        params = params._replace(weights=np.where(clients[:, None], stats.N / n_k[:, None], params.weights))
        mean_ll = loglik / n_k
        if previous is not None and np.max(np.abs(mean_ll - previous)[clients]) < tol:
            break
        previous = mean_ll
    return params.weights


def _check_finite(params, loglik, t, bound):
    bad = ~(params.is_finite() & np.isfinite(loglik))
    huge = np.abs(params.theta).reshape(len(loglik), -1).max(axis=1) > bound
    if (bad | huge).any():
        what = "non-finite parameters or log-likelihood" if bad.any() else "parameters beyond 1e8 times the data"
        raise DivergenceError(
            f"The run diverged in round {t}: client(s) {np.flatnonzero(bad | huge)[:10].tolist()} have {what}. "
            "Gradient methods: lower C_eta (steps contract for C_eta < 2; the paper's range is 0.55 to 1.35), "
            "and for regressions keep precondition=True. Otherwise look for clients whose data are far from "
            "the others' or nearly collinear.")
