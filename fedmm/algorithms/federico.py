"""FedeRiCo (Sui, Wen, Lau, Ross & Cresswell, "Find your friends"; ``method="federico"``).

Each client ``i`` models its data as a mixture over the clients' models,
``p(D_i) = sum_j Pi_ij p(D_i; phi_j)`` (Sec. 3.2, eq. (1)), and learns by EM over
the client assignment ``z_i``: the E-step's posterior is the collaborator weight
``w_ij`` (eq. (3)), the M-step updates every model ``phi_j`` on the data of the
clients that use it, weighted by ``w_ij`` (eqs. (5), (8)). Here every model
``phi_j`` is client ``j``'s own mixture of the family (proportions, components,
variances) and the loss is its negative log-likelihood.

One round, as the appendix's Algorithm 1 runs it without all-to-all
communication (Sec. 3.3):

1. client ``i`` holds its model and those of ``M`` neighbours ``B_i`` chosen
   epsilon-greedily from its weights (line 7: each pick uniform with
   probability ``epsilon``, else the highest weight not yet picked);
2. it evaluates its losses ``l_ib`` on its own data for itself and ``B_i``,
   keeps the previous losses of the others (line 11), updates the moving
   average ``L_ij <- (1 - beta) L_ij + beta l_ij`` (line 15) and its weights
   ``w_i = softmax(-L_i)`` (line 16);
3. it sends each model's owner ``b`` its E-step statistics under ``phi_b``,
   weighted by ``w_ib`` (line 20: the gradient ``g_bi`` is ``w_ib`` times the
   gradient of the loss, whose EM surrogate these statistics are);
4. client ``b`` updates ``phi_b`` from the statistics it received and its own
   (lines 22-25): fedmm takes the closed-form M-step of their sum, the
   mixture's exact minimizer of the surrogate where the paper takes a gradient
   step of a neural network ("or any other gradient-based method"). A model
   nobody uses (total weight below 1e-12 of a sample) is not updated, as in the paper.

Choices where the paper leaves room (``docs/decentralized.md``):

- ``loss="evidence"`` (default, fedmm's) is eq. (3)'s summed loss with each
  model's in-sample optimism on the client's rows taken off: a model fitted in
  part on client ``i``'s rows fits them better than it fits new rows by about
  ``P s_ij`` nats, ``P`` the mixture's free parameters and ``s_ij`` the share
  of model ``j``'s fit drawn from client ``i``'s rows (Takeuchi's correction,
  as in AIC: the expected cross term of the fit's score and the client's). So
  ``w_ij`` is the posterior that client ``i``'s rows and model ``j``'s come
  from one law, the exact-EM posterior of App. A (eqs. (22)-(24)) with
  the overfit removed, and tempered: in units of twice the noise in the
  difference of two models of one law. Two single-client fits of one law
  differ on a client's rows by ``chi^2_P`` nats in the own model's favour
  (mean ``P``, which the correction takes off; sd ``sqrt(2 P)``), so
  differences within about two of those sds are no evidence and share weight,
  while groups that differ by tens of nats are told apart.
  ``validation/every_client.py``: 0.46 to 0.65 of each client's own EM error
  on the issue-61 shapes (``"mean"``: 1.25 to 4.7); on the paper's design at
  ``h = 0`` 0.265 (``"mean"``: 0.258), at ``h = 1`` 1.59 (2.15)
  (``docs/research/every-client.md``).
- ``"sum"`` is eq. (3) as written: with likelihoods of continuous data each
  client's own model wins by about ``P`` nats, so the softmax is one-hot on it
  after one round and nobody collaborates.
- ``"mean"`` is the loss per sample, as the paper's networks are trained on
  batch-mean losses (fedmm's default before issue 61). The weights then carry
  ``1 / n`` of the evidence: near uniform where groups are close (a gap of
  0.03 nats a sample), so every model is fitted on nearly every client's rows
  and clients of a small or close group take the others' components: 1.25 to
  4.7 times their own EM's error in ``validation/every_client.py``.
- The first round evaluates every model on every client (all-to-all, once):
  Algorithm 1 starts the unseen losses at 0 (line 3), an optimistic guess for
  its non-negative losses but arbitrary for negative log-likelihoods of
  densities.
- ``beta=None`` accumulates the losses instead (``L_ij += l_ij``), the
  posterior of exact EM under a uniform prior (App. A, eqs. (22)-(24)).
- After the rounds each client reports the model it weighs most, or where it
  cannot tell that one from others (weights within a factor ``e``) and its
  group's rows can, the one of those its group's rows fit best
  (:meth:`FedeRiCo.used_models`), with its own proportions, refitted on its
  rows at that model's components: a model's proportions are those of all
  the clients that use it. A new client (``personalize``) joins the group
  whose model fits its rows best (:meth:`FedeRiCo.groups`).
"""

import warnings
from typing import NamedTuple

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from scipy.special import softmax
from sklearn.utils import check_random_state

from .. import _params as P
from ..families import MixtureParams
from ..protocol import n_floats
from ._base import Strategy, em_update
from .central import numbered_by_size

LOSSES = ("evidence", "mean", "sum")


def update_losses(L, ell, beta):
    """Algorithm 1 line 15: ``(1 - beta) L + beta ell``; ``beta=None`` accumulates, ``L + ell`` (App. A)."""
    return L + ell if beta is None else (1.0 - beta) * L + beta * ell


def optimism(P, share, size):
    """How much better a model fits the client's rows than new rows, in nats: ``P s N / (N - P - 1)`` for a
    model of ``P`` free parameters fitted on rows of total weight ``N``, a share ``s`` of them the client's.
    ``P s`` is Takeuchi's (AIC's) expected cross term of the fit's score and the client's; ``N / (N - P - 1)``
    the small-sample factor of AICc (Hurvich & Tsai, 1989), taken at ``N = P + 2`` (``P + 2``) for a fit on
    fewer rows, which fits them however they fall and says little of the client's law."""
    N = np.maximum(size, P + 2.0)
    return P * share * N / (N - P - 1.0)


def collaborator_weights(L):
    """Algorithm 1 line 16: ``w_ij = exp(-L_ij) / sum_j' exp(-L_ij')``, row by row."""
    return softmax(-L, axis=-1)


def epsilon_greedy(w, i, M, epsilon, rng):
    """Algorithm 1 line 7: ``M`` neighbours of client ``i`` (never ``i``), each uniform among those not yet
    picked with probability ``epsilon`` and otherwise the one with the highest weight ``w`` among them."""
    left = [j for j in np.argsort(-w, kind="stable") if j != i]
    picked = []
    for _ in range(min(M, len(left))):
        j = left[rng.randint(len(left))] if rng.random_sample() < epsilon else left[0]
        picked.append(j)
        left.remove(j)
    return np.array(picked, dtype=int)


class FedeRiCoMessage(NamedTuple):
    """Client ``i``'s reply: ``n``, ``loglik`` of its own model, its weights row ``w`` (K,), the models it
    evaluated ``slots`` (own first), and its statistics under each, weighted by ``w_ib`` (fields of shape
    (K, slots, R, ...))."""

    n: np.ndarray
    loglik: np.ndarray
    w: np.ndarray
    slots: np.ndarray
    stats: tuple


class FedeRiCoBroadcast(NamedTuple):
    """What client ``i`` holds for a round: its own model (``params``), the models ``models`` of the clients
    ``slots`` (own first; fields of shape (K, slots, ...)), and for ``loss="evidence"`` the share (K, slots) of
    each held model's fit drawn from client ``i``'s rows and the fit's size (K, slots), its rows' total weight."""

    params: MixtureParams
    slots: np.ndarray
    models: MixtureParams
    share: np.ndarray
    size: np.ndarray
    prior: None = None


class FedeRiCoDiagnostics(NamedTuple):
    """The fit's account: the clients' weights ``w`` (K, K) and their models' components ``theta`` (K, R, p), in
    the fitting units."""

    w: np.ndarray
    theta: np.ndarray


class FedeRiCoClientState(NamedTuple):
    """Client ``i``'s losses: the last seen ``ell`` (K,) and their moving average ``L`` (K,); None before the
    first round."""

    ell: np.ndarray
    L: np.ndarray


class FedeRiCoState(NamedTuple):
    """The network: the model, the clients' models, their weights ``w`` (K, K), the draws' generator, what
    each model's owner last received from each client (statistics fields of shape (K, K, R, ...): owner,
    sender), zeros before the first round, ``share[i, j]``, the share of model ``j``'s fit drawn from client
    ``i``'s rows (each its own at the start), and ``size[j]``, the total weight of the rows it was fitted on."""

    family: object
    params: MixtureParams
    w: np.ndarray
    rng: np.random.RandomState
    share: np.ndarray
    size: np.ndarray
    cache: tuple | None = None


def _weighted(stats, weights):
    """Every field scaled by ``weights`` along its leading axes."""
    return type(stats)(*(None if f is None else f * weights.reshape(weights.shape + (1,) * (f.ndim - weights.ndim))
                         for f in stats))


class FedeRiCo(Strategy):
    """FedeRiCo (``method="federico"``): each client a mixture over the clients' models.

    Parameters
    ----------
    n_neighbors : int, default=3
        ``M``, models a client evaluates besides its own each round (the paper's 3). With ``K`` clients there are
        ``K - 1`` besides its own: more draws a warning, and each client evaluates all of them.
    epsilon : float in [0, 1], default=0.3
        Probability of a uniform pick in the epsilon-greedy draw (the paper's 0.3).
    beta : float in (0, 1] or None, default=0.6
        Momentum of the losses' moving average (the paper's 0.6); 1 keeps only the latest
        losses, None accumulates them (exact EM under a uniform prior).
    loss : {"evidence", "mean", "sum"}, default="evidence"
        The summed negative log-likelihood less each model's in-sample optimism on the client's rows (fedmm's),
        per sample (the paper's networks'), or summed as eq. (3); the module docstring says why.
    random_state : int, RandomState or None, default=None
        The epsilon-greedy draws; None: a seed drawn from the estimator's ``random_state``.
    """

    name = "federico"
    _parameter_constraints = {"n_neighbors": P.integer(1), "epsilon": P.real(0.0, 1.0),
                              "beta": P.any_of(P.real(0.0, 1.0, low_open=True), P.none), "loss": P.one_of(*LOSSES),
                              "random_state": P.random_state}

    per_client = False
    sends_stats = True
    default_init = "local-em"
    ascent = False
    client_server = False

    def __init__(self, n_neighbors=3, epsilon=0.3, beta=0.6, loss="evidence", random_state=None):
        self.n_neighbors = n_neighbors
        self.epsilon = epsilon
        self.beta = beta
        self.loss = loss
        self.random_state = random_state

    def check_clients(self, n_clients):
        if 1 < n_clients <= self.n_neighbors:
            warnings.warn(f"FedeRiCo(n_neighbors={self.n_neighbors}): {n_clients} clients have {n_clients - 1} "
                          f"neighbours each, so each evaluates all {n_clients - 1}; set n_neighbors to "
                          f"{n_clients - 1} or less.", UserWarning, stacklevel=5)

    # --- client side -------------------------------------------------------------------

    def client_start(self, start, n_k):
        """No losses yet; the first round, which holds every model, sizes them."""
        return FedeRiCoClientState(None, None)

    def client_step(self, family, data, state, broadcast):
        """Losses of the models held, their moving average, weights, and the weighted statistics."""
        n_k = data.n_samples
        rows = np.arange(len(n_k))[:, None]
        if state.ell is None:
            state = FedeRiCoClientState(*(np.zeros((len(n_k), broadcast.slots.shape[1])) for _ in range(2)))
        ell, L = state.ell.copy(), state.L.copy()
        logliks, stats = [], []
        for s in range(broadcast.slots.shape[1]):
            loglik, st = family.estep(data, _slot(broadcast.models, s))
            logliks.append(loglik)
            stats.append(st)
        loglik = np.stack(logliks, axis=1)                                            # (K, slots)
        ell[rows, broadcast.slots] = self._losses(family, data, loglik, broadcast)
        L = update_losses(L, ell, self.beta)
        w = collaborator_weights(L)
        weighted = _weighted(type(stats[0])(*(None if f[0] is None else np.stack(f, axis=1) for f in zip(*stats))),
                             np.take_along_axis(w, broadcast.slots, axis=1))
        return FedeRiCoMessage(n_k, self._reported(loglik, w, broadcast.slots), w, broadcast.slots, weighted), \
            FedeRiCoClientState(ell, L)

    def _reported(self, loglik, w, slots):
        """The log-likelihood (K,) the client reports, which the stopping rule follows: under ``"evidence"`` that
        of the held model it weighs most (the model it relies on, :meth:`used_models`; its own model may be one
        it has dropped, refitted each round on others' few leftover weights); else its own model's."""
        if self.loss != "evidence":
            return loglik[:, 0]
        held = np.take_along_axis(w, slots, axis=1)
        return np.take_along_axis(loglik, held.argmax(axis=1)[:, None], axis=1)[:, 0]

    def _losses(self, family, data, loglik, broadcast):
        """``l_ib`` (K, slots) of the models held: :attr:`loss`'s negative log-likelihoods."""
        if self.loss == "mean":
            return -loglik / data.n_samples[:, None]
        if self.loss == "sum":
            return -loglik
        P = family.n_parameters(broadcast.params.theta.shape[1], data.n_features)
        return (-loglik + optimism(P, broadcast.share, broadcast.size)) / (2.0 * np.sqrt(2.0 * P))

    def local_update(self, family, stats, state, n_k):
        """A model owner's M-step on the weighted statistics it received (Alg. 1 lines 22-25), run in the
        exchange: proportions ``N_r / sum_r N_r`` and the family's closed-form maximizer."""
        return em_update(family, stats, n_k)

    # --- the exchange ------------------------------------------------------------------

    def server_start(self, family, start, n_k):
        K = len(n_k)
        state = FedeRiCoState(family, start, np.full((K, K), 1.0 / K), check_random_state(self.random_state),
                              np.eye(K), np.asarray(n_k, dtype=float))
        everyone = np.array([[i] + [j for j in range(K) if j != i] for i in range(K)])  # round 1: all-to-all
        return self._deliver(start, everyone, state), state

    def server_step(self, messages, state, t):
        """Every model's M-step on the latest statistics each client sent it; then each client's next neighbours."""
        family, K = state.family, len(messages.n)
        if state.cache is None:
            state = state._replace(cache=type(messages.stats)(*(
                None if f is None else np.zeros((K, K) + f.shape[2:]) for f in messages.stats)))
        owner, sender = messages.slots.ravel(), np.repeat(np.arange(K), messages.slots.shape[1])
        cache = type(messages.stats)(*(None if c is None else _put(c, owner, sender, f.reshape((-1,) + f.shape[2:]))
                                       for c, f in zip(state.cache, messages.stats)))
        received = type(cache)(*(None if c is None else c.sum(axis=1) for c in cache))
        total = received.N.sum(axis=1)
        new = self.local_update(family, received, None, np.maximum(total, 1e-300))
        params = new.where(total > 1e-12, state.params)
        # share[i, j]: client i's weighted responsibilities in model j's M-step, over all it was fitted on, as a
        # moving average with the losses' beta (Alg. 1 line 15; the latest where they accumulate). The share enters
        # the loss (its optimism): taken from the last round alone, a client that used a model paid for its share
        # the next round, left it, and came back, a cycle of two rounds that ran fits to max_iter (3 of 6 seeds of
        # a 3-client design, 2 of 6 of two groups of six in 10-D); the average damps it, and where the rounds
        # settle it changes nothing.
        fitted = total > 1e-12
        share = update_losses(state.share, cache.N.sum(axis=-1).T / np.maximum(total, 1e-300)[None], self.beta or 1.0)
        state = state._replace(params=params, w=messages.w, cache=cache, size=np.where(fitted, total, state.size),
                               share=np.where(fitted[None], share, state.share))
        slots = np.array([np.concatenate([[i], epsilon_greedy(messages.w[i], i, self.n_neighbors, self.epsilon,
                                                              state.rng)]) for i in range(K)])
        return self._deliver(params, slots, state), state

    @staticmethod
    def _deliver(params, slots, state):
        return FedeRiCoBroadcast(params, slots, params.take(slots), np.take_along_axis(state.share, slots, axis=1),
                                 state.size[slots])

    def communication(self, messages, broadcast, state):
        """In a round client ``i`` received the model of each neighbour it evaluated and sent that neighbour its
        weighted statistics: one message each way per (client, neighbour) pair (all pairs in round 1)."""
        K, slots = messages.slots.shape
        pairs = K * (slots - 1)
        per_model = n_floats(broadcast.params) // K
        per_stats = n_floats(messages.stats) // (K * slots)
        return {"messages": 2 * pairs, "floats": pairs * (per_model + per_stats)}

    def diagnostics(self, state):
        return FedeRiCoDiagnostics(state.w, state.params.theta)

    def groups(self, diagnostics):
        """The clients' groups, the largest first, and each group's most used model (:meth:`used_models`): a new
        client (``personalize``) joins the one that fits its rows best. Models tied for some client
        (:func:`tied_models`) are one group's. Clients of one group spread their weight over its models, fitted on
        the same rows: counted apart, two groups of six gave four or five centres 0.007 apart."""
        used = self.used_models(diagnostics)
        labels = numbered_by_size(tied_models(diagnostics.w, used)[1][used])
        models = [np.bincount(used[labels == g]).argmax() for g in range(labels.max() + 1)]
        return diagnostics.theta[models], labels

    def fitted_attributes(self, result, client_ids, n_k):
        """``collaborator_weights_`` (K, K): row ``i`` is client ``i``'s ``w_ij`` after the last round;
        ``used_models_`` (K,): the client whose model client ``i`` reports (:meth:`used_models`)."""
        return {"collaborator_weights_": result.diagnostics.w,
                "used_models_": client_ids[self.used_models(result.diagnostics)]}

    def used_models(self, diagnostics):
        """The model each client relies on: the one it weighs most, its own where it weighs it as much as any
        (``w_ii`` within ``1e-9`` of its row's largest), unless it cannot tell that one from others (models it
        weighs within a factor ``e`` of it, :func:`tied_models`) and its group's rows can: then the one of those
        its group's ``m`` clients weigh most together, where they weigh it more than the client's own choice by
        more than ``sqrt(m)``. ``sum_k log w_kj`` over the group is minus model ``j``'s summed losses on the
        group's rows, up to a constant per client (``w_k = softmax(-L_k)``, Alg. 1 line 16), in units of two null
        standard deviations of one client's loss difference (the factor ``e``); a sum over ``m`` clients has
        ``sqrt(m)`` times the noise. A client's own model can be stuck in a poor optimum while the client puts
        almost all its weight on a collaborator's (the losses say so): it then predicts, and reports, what it
        relies on, not a model it has all but dropped."""
        w = diagnostics.w
        own = np.diag(w) >= w.max(axis=1) * (1 - 1e-9)
        first = np.where(own, np.arange(len(w)), w.argmax(axis=1))
        tied, component = tied_models(w, first)
        group = np.unique(component[first], return_inverse=True)[1]
        log_w = np.log(np.maximum(w, np.finfo(float).tiny))
        summed = np.stack([log_w[group == g].sum(axis=0) for g in range(group.max() + 1)])   # (groups, K)
        together = np.where(tied, summed[group], -np.inf)
        rows = np.arange(len(w))
        best = together.argmax(axis=1)
        evident = together[rows, best] - together[rows, first] > np.sqrt(np.bincount(group)[group])
        return np.where(evident, best, first)


def tied_models(w, used):
    """``(tied, component)``: ``tied[i, j]``, whether client ``i`` weighs model ``j`` within a factor ``e`` of its
    most weighted (a loss one temperature apart: under ``loss="evidence"`` two null standard deviations, no
    evidence), its ``used`` model included; ``component[j]``, model ``j``'s group, models tied for some client
    joined (connected components)."""
    tied = w >= w.max(axis=1, keepdims=True) / np.e
    tied[np.arange(len(w)), used] = True
    return tied, connected_components(csr_matrix(tied.T.astype(int) @ tied.astype(int)), directed=False)[1]


def _slot(models, s):
    """The clients' ``s``-th held model, as (K, R, ...) parameters."""
    return MixtureParams(*(f[:, s] for f in models))


def _put(cache, owner, sender, values):
    """A copy of ``cache`` with entry ``(owner[m], sender[m])`` set to ``values[m]``."""
    cache = cache.copy()
    cache[owner, sender] = values
    return cache
