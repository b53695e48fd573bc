"""What every estimation strategy shares: the client side of a round, and the local updates.

A strategy is a client step and a server step over the typed messages of
:mod:`fedmm.protocol`; :mod:`fedmm.engine` runs the rounds. The client step
is the same for every strategy (E-step, then the strategy's
:meth:`Strategy.local_update`), so a strategy says only what its clients
compute from their statistics and what its server does with the messages.
"""

from abc import ABC, abstractmethod
from typing import Callable, NamedTuple

import numpy as np
from sklearn.base import BaseEstimator

from .. import _params as P
from ..families import MixtureParams
from ..protocol import Broadcast, ClientMessage, ClientState, n_floats
from ..robust import first_best

__all__ = ["Strategy", "GradientStrategy", "PrivateForm", "shares_mean", "em_update", "grem_update", "step_sizes",
           "ETA_RULES"]


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


ETA_RULES = ("safeguarded", "initial", "current")


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

    ``"current"``: ``C_eta / max(w_hat^{[t]}, 1 / n_k)``, this round's weights alone: with ``C_eta = 1``
    the M-step of the means (FedGrEM Algorithm 1 with its step at the M-step's length), what a private fit's
    FedGrEM takes (:mod:`fedmm.privacy`: its rounds are few, fixed by the budget, and the server bounds each
    client's pull by the clip already).

    ``w0`` are the starting weights, floored at ``1 / n_k`` (one sample's worth)
    so an empty starting component cannot give an infinite step.
    """
    if rule == "initial":
        return C_eta / w0
    if rule == "current":
        return C_eta / np.maximum(stats.N / n_k[:, None], 1.0 / n_k[:, None])
    return C_eta / np.maximum(w0, stats.N / n_k[:, None])


def shares_mean(updates, share, clip):
    """The clients' updates (K, m) averaged with their shares ``share`` (K,): FedEM's server under local noise
    (:class:`PrivateForm`; ``clip`` unused)."""
    return share @ updates


class PrivateForm(NamedTuple):
    """How a method takes part in a differentially private fit at one level (:meth:`Strategy.private`), which
    :mod:`fedmm.privacy` runs.

    The release is the same for every method: at the level of clients the noisy average of the clients' clipped
    updates from the released components (:func:`fedmm.privacy.encode`), at the level of samples the M-step of
    the noisy total of their whitened sums. A method declares what its server and clients do around it.

    Attributes
    ----------
    centre : callable, default=shares_mean
        ``centre(updates, share, clip) -> (m,)``: the server's point from the clients' noisy updates (K, m) under
        local noise at the level of clients, with their shares (K,) and the clip: their shares' average (FedEM),
        the centre of FedGrEM's central problem (:func:`fedmm.algorithms.central.robust_centre`). Each update is
        private already, so any function of them is (post-processing).
    personal : bool, default=False
        Whether each client takes its own components about the release (FedGrEM's shrinkage step,
        :func:`fedmm.privacy.personal_components`) rather than the release's.
    pooled : bool, default=False
        Whether the clients take the released proportions (pooled EM) rather than their own.
    options : dict, default={}
        The method's options a private fit sets (FedGrEM's clients take their whole M-step:
        ``{"eta_rule": "current"}``); every other option stays at its default.
    """

    centre: Callable = shares_mean
    personal: bool = False
    pooled: bool = False
    options: dict = {}


class Strategy(BaseEstimator, ABC):
    """An estimation strategy: a client step and a server step (``docs/architecture.md``).

    A strategy is the estimators' ``method``: a parameter object in scikit-learn's sense. Its
    constructor stores its options unchanged (``get_params``, ``set_params``, ``clone`` and
    ``GridSearchCV``'s ``method__<option>`` work through the estimator), :attr:`_parameter_constraints`
    declares what each may be, and :meth:`validate` checks them once, before a fit.

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
    sends_stats : bool
        Whether the clients' messages carry their sufficient statistics.
    default_init : str
        The start ``init="auto"`` means (see :mod:`fedmm.initialization`).
    stop_on : {"log_likelihood", "parameter_change"}
        What ``tol`` is compared with: the change of mean log-likelihood per
        sample (scikit-learn's rule) or of the parameters.
    ascent : bool
        Whether no round should lower the log-likelihood (EM and gradient EM
        with a contracting step are generalized EM algorithms); FedEM, TGMM
        and FedGrEM trade likelihood for agreement between clients.
    client_server : bool
        Whether a server hears the clients every round: rounds send one
        message up and one down per client (:meth:`communication`), and a
        round may hear only some clients (the estimators' ``participation``).
        False for the local methods and TGMM (nothing is sent after the start)
        and the decentralized methods (messages go between neighbours).
    local : bool
        Whether, after its start, the server only sends each client its own message back
        (:func:`~fedmm.algorithms.local.echo`; the local methods, TGMM): each client then runs its rounds alone,
        to its own stopping rule, and replies once (the query ``local``, :func:`fedmm.clients.local_rounds`).
        Such a method is not :attr:`client_server`.
    name : str
        The name ``method=`` takes for this strategy (:data:`fedmm.methods.METHODS`).
    robust : bool
        Whether the method promises to keep the honest clients' estimates when some parties are
        malicious (FedGrEM: fewer than a third, ``docs/threat-model.md``). Across parties, a method
        without the promise warns (:func:`fedmm.flower.fit`).
    models : tuple of str
        The models the method fits: ``"gmm"`` (Gaussian mixtures) and ``"mor"`` (mixtures of regressions);
        a fit of another refuses with a ``ValueError``.
    """

    #: What each constructor argument may be (:mod:`fedmm._params`).
    _parameter_constraints = {}

    per_client = True
    shared = False
    shares_components = False
    sends_stats = False
    default_init = "family"
    stop_on = "log_likelihood"
    ascent = True
    client_server = True
    local = False
    name = None
    robust = False
    models = ("gmm", "mor")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.local and cls.client_server:
            raise TypeError(f"{cls.__name__}: a local method's clients run their rounds alone (local = True), so no "
                            "server hears them every round: set client_server = False.")
        if "private" not in vars(cls):   # a private form holds for the rounds it was declared for: not inherited
            cls.private = Strategy.private

    def validate(self):
        """Check every option against its declared constraint; ``self``."""
        P.validate(self.get_params(deep=False), self._parameter_constraints)
        return self

    def check_clients(self, n_clients):
        """Warn where an option asks for more than ``n_clients`` clients can give (an option that is a most, as
        scikit-learn's ``LocalOutlierFactor(n_neighbors)`` and ``IsolationForest(max_samples)``: the fit uses what
        there is). Called once a fit, when the number of clients is known."""

    def tune(self, fit, clients, random_state):
        """The strategy to fit, where an option asks the data to choose (FedGrEM's ``penalty="auto"``):
        ``(strategy, selection)``, ``selection`` a dict that says what was compared (None: nothing was).

        ``fit(train, strategies)`` fits each of ``strategies`` from the same starts on ``train``, a transport
        of some of the clients' rows (:meth:`fedmm.clients.LocalClients.training`), and returns their
        parameters; ``clients`` is the transport of all of them.
        """
        return self, None

    # --- client side -------------------------------------------------------------------

    def client_options(self):
        """The options a client needs to rebuild this strategy's client side (``METHODS[name](
        **options)``) when it runs in another process (:mod:`fedmm.flower`): none unless overridden."""
        return {}

    def client_start(self, start, n_k):
        """A client's state before the first round, from its start and size."""
        return ClientState(start, np.maximum(start.weights, 1.0 / n_k[:, None]))

    def client_step(self, family, data, state, broadcast):
        """E-step at the parameters the server sent, then :meth:`local_update`: ``(ClientMessage, ClientState)``."""
        params = broadcast.params
        state = ClientState(params, state.w0, state.prior if broadcast.prior is None else broadcast.prior)
        n_k = data.n_samples
        loglik, stats = family.estep(data, params)
        local = self.local_update(family, stats, state, n_k)
        return ClientMessage(n_k, loglik, *local, stats if self.sends_stats else None), state

    @abstractmethod
    def local_update(self, family, stats, state, n_k):
        """The client's new ``MixtureParams`` from its E-step statistics."""

    # --- server side -------------------------------------------------------------------

    def server_start(self, family, start, n_k):
        """The first broadcast (the start) and the server's state: ``(Broadcast, state)``."""
        return Broadcast(start), None

    @abstractmethod
    def server_step(self, messages, state, t):
        """Round ``t`` on the server, from the clients' stacked messages: ``(Broadcast, state)``."""

    def communication(self, messages, broadcast, state):
        """``{"messages": ..., "floats": ...}`` sent in a round, from the messages of the clients heard and the
        server's replies to them: one message each way per client, every number of the protocol's messages
        counted (what a deployment sends); nothing for a strategy that is not :attr:`client_server`."""
        if not self.client_server:
            return {"messages": 0, "floats": 0}
        return {"messages": 2 * len(messages.n), "floats": n_floats(messages) + n_floats(broadcast)}

    def round_info(self, state):
        """Scalars recorded in ``history`` after every round, beyond the common ones."""
        return {}

    def diagnostics(self, state):
        """The server's typed account of a finished run (e.g. FedGrEM's :class:`Consensus`), or None."""
        return None

    def center(self, diagnostics):
        """The consensus component parameters (R, p) in the fitting units, or None when there is none."""
        return None

    #: The criterion :func:`fedmm.selection.select_n_components` uses by default: ``"bic"`` where the parameter count
    #: does not depend on how far the fit pooled, ``"fewest"`` (BIC's or cross-validation's choice, the fewer, and
    #: ICL's too where the clients differ: :func:`fedmm.selection.select_n_components`) where it does (FedGrEM).
    selection_criterion = "bic"

    def groups(self, diagnostics):
        """``(centers, labels)``: the consensus of every group of clients (G, R, p), the largest first, and each
        client's group (K,); None when there is no consensus. One group holding every client unless the method
        finds groups (FedGrEM's ``n_centers``)."""
        center = self.center(diagnostics)
        return None if center is None else (center[None], None)

    def fitted_attributes(self, result, client_ids, n_k):
        """Strategy-specific fitted attributes of the estimator (name -> value)."""
        return {}

    def used_models(self, diagnostics):
        """(K,) the client whose model each client reports and predicts with (None: each its own). A method
        whose clients rely on several models says here which one each relies on most."""
        return None

    def distinct_components(self, model, index, p, scale_per_component):
        """``(means, scales)``, arrays of ``R``: how many distinct values each component's ``p`` parameters and
        its variances take among the fitted clients ``index`` of ``model`` (the fitted estimator), which BIC,
        ICL and AIC count (fractions where a method shrinks towards a shared value): one where clients share
        their components (:attr:`shares_components`), one per client otherwise."""
        R = model.n_components
        n = np.full(R, 1.0 if self.shares_components else float(len(index)))
        return n, n

    def new_client(self, family, data, params, history, max_iter, tol):
        """The parameters of a client unseen at training (:meth:`personalize
        <fedmm.FederatedGaussianMixture.personalize>`), from its own rows ``data`` alone: ``params`` (one client)
        holds the consensus components of the group that fits it best and its own proportions. By default the
        components stay at the consensus: the model of a method whose clients share them (FedEM Sec. 2.2 / 3.2).
        ``history`` is the fit's ``history_``."""
        return params

    def better_run(self, best, candidate, n_k):
        """Whether the run from a later start (:class:`fedmm.engine.FitResult`) replaces the best so far:
        a higher total log-likelihood (a tie up to rounding keeps the earlier run)."""
        return first_best([best.loglik.sum(), candidate.loglik.sum()]) == 1

    # --- privacy -------------------------------------------------------------------------

    def private(self, unit):
        """How this method runs under differential privacy (:mod:`fedmm.privacy`) at the level ``unit``
        (``"client"``: each client protected; ``"sample"``: each row): a :class:`PrivateForm`, or None where it has
        none (the default). Declared by each class for itself: a subclass, whose rounds may differ, inherits
        none (it may take its parent's: ``private = FedEM.private``)."""
        return None

    # --- restarts (called by the engine after a run) -------------------------------------

    def restart(self, params, diagnostics, attempt):
        """A further pass after a pass that ended at ``params`` and ``diagnostics``: ``(start, fresh)`` with
        ``fresh`` (K,) the clients whose mixing proportions are refitted to the new start, or None to stop."""
        return None

    def restarting(self, diagnostics, attempt):
        """(K,) bool: the clients :meth:`restart` ``(params, diagnostics, attempt)`` would start afresh were the pass to end
        at ``diagnostics``; None when no restart would follow. The engine ends a pass once only these still move."""
        return None

    def keep_restart(self, before, trial):
        """(K,) bool: the clients that keep the restarted pass ``trial`` rather than ``before``."""
        return np.ones(len(before.loglik), dtype=bool)

    def own_fits(self, result, own, n_k, n_parameters, located_loglik):
        """(K,) bool: the clients whose own fit ``own`` (a :class:`fedmm.initialization.Start` of EM on each
        client's rows alone, with their log-likelihoods) replaces their estimate of the run ``result``, or None
        (none: the default). ``located_loglik(which)``: the clients' log-likelihoods (K,) at their estimate with
        the own fit's locations (means or coefficients) for the clients ``which``, one query."""
        return None

    def may_keep_moving(self, diagnostics, params, n_k):
        """(K,) bool: clients whose motion the stopping rule does not wait for, or None (it waits for every
        client). A robust method's: clients it has set apart from the others, so that one party that never
        settles cannot hold the fit to ``max_iter`` rounds (``docs/threat-model.md``)."""
        return None


#: The options of every strategy whose server hears the clients each round (:attr:`Strategy.client_server`).
CLIENT_SERVER_CONSTRAINTS = {"participation": P.real(0.0, 1.0, low_open=True),
                             "dropout": P.real(0.0, 1.0, high_open=True)}
CLIENT_SERVER_DOC = """participation : float in (0, 1], default=1.0
        The fraction of clients the server asks each round after the first, drawn from the estimator's
        ``random_state``; it reuses the last message of the others (:class:`fedmm.protocol.Participation`,
        ``docs/decentralized.md``).
    dropout : float in [0, 1), default=0.0
        The probability that an asked client does not reply in a round (it is then treated as not asked)."""


class GradientStrategy(Strategy):
    """A strategy whose clients take one gradient M-step per round.

    Parameters
    ----------
    C_eta : float in (0, 2), default=1.0
        Gradient steps ``eta_r^{(k)} = C_eta / w_hat_r^{(k)[0]}`` (FedGrEM App. A.1, Cor. A.12; App. B.1
        tests 0.55 to 1.35; :func:`step_sizes`).
    eta_rule : {"safeguarded", "initial", "current"}, default="safeguarded"
        ``"initial"``: the paper's fixed ``C_eta / w_hat^{[0]}``; ``"safeguarded"``:
        ``C_eta / max(w_hat^{[0]}, w_hat^{[t]})``, the same while weights do not grow, and it cannot
        overshoot when they do; ``"current"``: ``C_eta / w_hat^{[t]}``, the M-step's length at ``C_eta = 1``
        (a private fit's, :mod:`fedmm.privacy`).
    """

    _parameter_constraints = {
        "C_eta": P.Constraint(P.real(0.0, 2.0, low_open=True, high_open=True).accepts,
                              "a number in (0, 2): a gradient step with eta * w >= 2 overshoots the M-step instead "
                              "of moving towards it (the paper uses 0.55 to 1.35)"),
        "eta_rule": P.one_of(*ETA_RULES)}

    def __init__(self, C_eta=1.0, eta_rule="safeguarded"):
        self.C_eta = C_eta
        self.eta_rule = eta_rule

    def client_options(self):
        """The step sizes: what a gradient client needs."""
        return {"C_eta": self.C_eta, "eta_rule": self.eta_rule}

    def local_update(self, family, stats, state, n_k):
        eta = step_sizes(state.w0, stats, n_k, self.C_eta, self.eta_rule)
        return grem_update(family, stats, state.params, eta, n_k)
