"""What crosses the client/server boundary: typed messages of arrays (``docs/architecture.md``).

Every strategy (:mod:`fedmm.algorithms`) is two pure functions over these types:

- ``client_step(family, data, state, broadcast) -> (ClientMessage, ClientState)``
  sees one client's raw data (or, batched, several clients' data side by side,
  each computed on alone) and returns parameters, sizes and, where the method
  is defined by them, sufficient statistics;
- ``server_step(messages, server_state, t) -> (Broadcast, server_state)``
  sees the clients' messages stacked along a leading client axis, never data.

Every array has a leading axis over clients (of length 1 for a single client),
so one client's message is ``take(messages, k)`` and a round's messages are
``stack`` of the clients'. No field grows with a client's sample size ``n_k``.
"""

import contextlib
from typing import NamedTuple, Protocol

import numpy as np
from sklearn.utils import check_random_state

from .families import MixtureParams

__all__ = ["ClientMessage", "Broadcast", "Prior", "ClientState", "Ledger", "Rounds", "Transport", "calls", "take",
           "stack", "put", "n_floats", "Participation"]


class ClientMessage(NamedTuple):
    """A client's reply after its E-step and local update (FedGrEM Algorithm 1, client side).

    Attributes
    ----------
    n : ndarray of shape (K,)
        Sample size ``n_k``.
    loglik : ndarray of shape (K,)
        Log-likelihood of the client's data at the parameters it was sent.
    weights : ndarray of shape (K, R)
        ``w_hat_r = N_r / n_k``, the M-step of the mixing proportions.
    theta : ndarray of shape (K, R, p)
        The locally updated component parameters: the M-step (EM methods) or
        one gradient step (gradient methods).
    scale : ndarray of shape (K, R, s)
        The variances that maximize ``Q-hat`` at ``theta`` (fixed ones as given).
    stats : NamedTuple of arrays or None
        The family's responsibility-weighted sums (:class:`fedmm.families.gaussian.GaussianStats`,
        :class:`fedmm.families.regression.RegressionStats`), fields of shape
        (K, R, ...): sent only by strategies whose server step is defined by
        them (pooled methods; FedGrEM's pooled variances). None otherwise.
    """

    n: np.ndarray
    loglik: np.ndarray
    weights: np.ndarray
    theta: np.ndarray
    scale: np.ndarray
    stats: tuple | None = None


class Prior(NamedTuple):
    """A Gaussian prior on every client's components: ``strength N_r / (2 sigma_r^2) ||theta_r - target_r||^2``.

    Attributes
    ----------
    target : ndarray of shape (K, R, p)
    strength : ndarray of shape (K,)
    """

    target: np.ndarray
    strength: np.ndarray


class Broadcast(NamedTuple):
    """The server's reply: row ``k`` of every field goes to client ``k``.

    Attributes
    ----------
    params : MixtureParams
        The parameters each client holds for the next round (weights (K, R),
        theta (K, R, p), scale (K, R, s)).
    prior : Prior or None
        TGMM's pull towards the other clients' starts, sent once with the
        start; None otherwise (a client keeps the last prior it was sent).
    """

    params: MixtureParams
    prior: Prior | None = None


class ClientState(NamedTuple):
    """What a client keeps between rounds.

    Attributes
    ----------
    params : MixtureParams
        The parameters it last received.
    w0 : ndarray of shape (K, R)
        Its starting proportions, floored at ``1 / n_k``: the gradient step
        sizes ``C_eta / w0`` (FedGrEM App. B.1).
    prior : Prior or None
    """

    params: MixtureParams
    w0: np.ndarray
    prior: Prior | None = None


def take(tree, k):
    """Client ``k``'s part (leading axis kept, of length 1) of a message, broadcast or state; for an array of
    indices, those clients' parts in that order."""
    if tree is None:
        return None
    if isinstance(tree, tuple):
        return type(tree)(*(take(field, k) for field in tree))
    return tree[k:k + 1] if np.ndim(k) == 0 else tree[k]


def put(tree, index, part):
    """A copy of ``tree`` whose rows ``index`` are ``part``'s (a round heard from some clients only)."""
    if tree is None:
        return None
    if isinstance(tree, tuple):
        return type(tree)(*(put(field, index, new) for field, new in zip(tree, part)))
    tree = tree.copy()
    tree[index] = part
    return tree


def n_floats(tree):
    """How many numbers a message or broadcast carries, over all its clients (communication accounting)."""
    if tree is None:
        return 0
    if isinstance(tree, tuple):
        return sum(n_floats(field) for field in tree)
    return int(np.size(tree))


def stack(trees):
    """The clients' messages, broadcasts or states joined along the leading client axis."""
    first = trees[0]
    if first is None:
        return None
    if isinstance(first, tuple):
        return type(first)(*(stack([t[i] for t in trees]) for i in range(len(first))))
    return np.concatenate(trees)


class Ledger:
    """What a transport carried between the server and the clients, query by query: a fit's ``communication_``.

    Every query (the units' sums, the starts, every round, the log-likelihoods, ...) is one message down to
    each client asked and one message up from each that replied, of the arrays the protocol names: counted
    in bytes of their numbers as fedmm's Flower codec sends them (float64, 8 bytes each; Flower's envelope,
    the arrays' names and the query's settings not counted). :class:`fedmm.clients.LocalClients` records what
    it would send, :class:`fedmm.flower.server.FlowerClients` what it sent and received, and the two agree
    (``tests/test_communication.py``).

    Parameters
    ----------
    n_clients : int
    """

    #: The phases of a fit, in order: the data's units (``"setup"``), the starts (``"start"``,
    #: :func:`fedmm.initialization.make_starts`), the method's rounds and what follows them (``"rounds"``).
    PHASES = ("setup", "start", "rounds")

    def __init__(self, n_clients):
        self.actions, self.methods, self.asked, self.replied, self.down, self.up = [], [], [], [], [], []
        self.phase, self.phases = "setup", []
        self.client = {key: np.zeros(n_clients, dtype=np.int64) for key in
                       ("messages_down", "messages_up", "bytes_down", "bytes_up")}
        self._parts = None   # the queries of one message being recorded (:meth:`joined`)

    @contextlib.contextmanager
    def joined(self):
        """The queries recorded within go in one message (:meth:`fedmm.clients.LocalClients.together`): one query,
        named by theirs joined with ``+`` (``"step+loglik"``), to every client any of them asked, of their bytes."""
        self._parts = parts = []
        try:
            yield
        finally:
            self._parts = None
        if not parts:
            return
        K = len(self.client["bytes_up"])
        asked, down, up = np.zeros(K, dtype=bool), np.zeros(K, dtype=np.int64), np.zeros(K, dtype=np.int64)
        for _, index, sent, received, _ in parts:
            asked[index] = True
            down[index] += sent
            up[index] += received
        index = np.flatnonzero(asked)
        self.record("+".join(dict.fromkeys(part[0] for part in parts)), index, down[index], up[index],
                    method=next((part[4] for part in parts if part[4]), ""))

    def record(self, action, index, down, up, replied=None, method=""):
        """Query ``action`` sent ``down`` bytes to each client of ``index`` (positions; None: all) and received
        ``up`` bytes from each, scalars (the same for every client) or one per client; ``replied`` (bool, one
        per client of ``index``; default all) says who replied; ``method`` names the strategy whose
        ``start`` or ``step`` it is (a start's local EM, or the fit's method)."""
        index = np.arange(len(self.client["bytes_up"])) if index is None else np.asarray(index, dtype=np.int64)
        down = np.broadcast_to(np.asarray(down, dtype=np.int64), index.shape)
        replied = np.ones(index.shape, dtype=bool) if replied is None else np.asarray(replied, dtype=bool)
        up = np.where(replied, np.broadcast_to(np.asarray(up, dtype=np.int64), index.shape), 0)
        if self._parts is not None:
            self._parts.append((action, index, down, up, method))
            return
        self.actions.append(action)
        self.methods.append(method)
        self.phases.append(self.phase)
        self.asked.append(len(index))
        self.replied.append(int(replied.sum()))
        self.down.append(int(down.sum()))
        self.up.append(int(up.sum()))
        # A query asks each client once: plain indexed additions (no repeated indices to accumulate).
        self.client["messages_down"][index] += 1
        self.client["messages_up"][index[replied]] += 1
        self.client["bytes_down"][index] += down
        self.client["bytes_up"][index] += up

    def summary(self):
        """``{"query", "method", "phase", "messages_down", "messages_up", "bytes_down", "bytes_up"}``, one entry per
        query in order (a method's rounds are its ``"step"`` queries; ``phase``, one of :data:`PHASES`), and
        ``"client_<the same>"``, every client's totals."""
        counts = {"messages_down": self.asked, "messages_up": self.replied, "bytes_down": self.down,
                  "bytes_up": self.up}
        out = {"query": np.array(self.actions), "method": np.array(self.methods), "phase": np.array(self.phases),
               **{key: np.array(value, dtype=np.int64) for key, value in counts.items()}}
        return {**out, **{f"client_{key}": value.copy() for key, value in self.client.items()}}


class Rounds(Protocol):
    """What a run of rounds asks of its clients (:func:`fedmm.engine.run_rounds`): a private fit's transports
    (:mod:`fedmm.privacy`, :mod:`fedmm.flower.secure`) offer this much.

    ``n_clients``, ``n_samples`` (K,), ``family`` and ``ledger`` (:class:`Ledger`) describe the federation;
    ``data_scale`` is the largest absolute value in any client's data (the divergence check's unit).
    """

    n_clients: int
    n_samples: np.ndarray
    data_scale: float
    family: object
    ledger: "Ledger"

    def start(self, strategy, params):
        """Every client takes its state from its row of the start ``params`` (``strategy.client_start``)."""

    def step(self, strategy, broadcast, heard=None):
        """One round: ``(messages, replied)``, the replies of the clients ``heard`` (None: all) to their rows of
        ``broadcast``, stacked, and the clients they came from (those whose reply was lost or refused left out)."""

    def loglik(self, params):
        """(K,) every client's log-likelihood at its row of ``params``."""


class Transport(Rounds, Protocol):
    """Everything the server side of a fit may ask of its clients, in this process
    (:class:`fedmm.clients.LocalClients`) or across parties (:class:`fedmm.flower.server.FlowerClients`): the
    engine, the starts, the units and the penalty's cross-validation reach clients through these calls only.
    """

    def start_runs(self, runs):
        """:meth:`start` of several runs side by side in one query (:func:`fedmm.engine.drive`): ``runs``, a list
        of ``(slot, strategy, params)``; each client keeps each run's state in its slot."""

    def step_runs(self, runs):
        """:meth:`step` of several runs side by side in one query: ``runs``, a list of ``(slot, strategy,
        broadcast, heard, start)`` (``start``: None, or the ``(strategy, params)`` the run's clients start from
        first); a list of ``(messages, replied)``."""

    def loglik_runs(self, runs):
        """:meth:`loglik` of several runs in one query: ``runs``, a list of ``(slot, params)``; a list of (K,)."""

    def local(self, strategy, broadcast, max_iter, tol):
        """Every client runs its own rounds of a method that runs on its own (:attr:`~fedmm.algorithms.Strategy.local`)
        from ``broadcast``: a :class:`fedmm.clients.LocalFit`."""

    def local_runs(self, runs):
        """Every client runs its own rounds of methods that run on their own (:attr:`~fedmm.algorithms.Strategy.local`),
        several runs in one query: ``runs``, a list of ``(strategy, broadcast, max_iter, tol)``; a list
        of :class:`fedmm.clients.LocalFit`."""

    def together(self, batch):
        """Queries of several kinds in one message (:func:`fedmm.engine.drive`): ``batch``, ``{kind: [arguments]}``
        with kinds among ``start``, ``step``, ``loglik``, ``local`` (the arguments of their ``_runs`` calls),
        ``fit_weights`` and ``family_starts`` (one call's each); ``{kind: [answers]}``. One query, ``"step+loglik"``
        say."""

    def moments(self):
        """The clients' pooled moments (:func:`fedmm.units.pooled_moments`): sums the server adds."""

    def set_units(self, units, scale_reply=True):
        """Every client moves its data into the fit's standard units (:mod:`fedmm.units`)."""

    def family_starts(self, seeds, n_components, which=None, features=None):
        """The clients' own starts from their seeds (``which``: those clients only; ``features``: on those
        features of their rows only), stacked parameters."""

    def user_start(self, weights, theta):
        """The start from given parameters, its variances fitted by each client."""

    def fit_weights(self, params, which=None, max_iter=100, tol=1e-3):
        """(K, R): the clients ``which`` (bool mask; None: all) refit their proportions to ``params``."""

    def deal_folds(self, n_folds, seeds):
        """Every client deals its rows into ``n_folds`` folds from its own seed."""

    def training(self, fold):
        """The clients answering from their rows outside ``fold``: a transport of its own."""

    def held_out_loglik(self, fold, params):
        """(K,) every client's log-likelihood of its rows in ``fold`` at its row of ``params``."""


def calls(protocol):
    """The names a transport ``protocol`` declares (:class:`Rounds`, :class:`Transport`), attributes and calls."""
    names = {}
    for cls in reversed(protocol.__mro__):
        if cls is Protocol or not getattr(cls, "_is_protocol", False):
            continue
        names.update(dict.fromkeys(getattr(cls, "__annotations__", {})))
        names.update(dict.fromkeys(k for k, v in vars(cls).items() if callable(v) and not k.startswith("_")))
    return tuple(names)


class Participation:
    """Which clients a round hears: a sample of ``fraction`` of them, less those that drop out.

    Every round after the first the server asks ``max(1, round(fraction K))`` clients drawn uniformly without
    replacement (FedEM's client sampling, Marfoq et al. Sec. 4 and App. J.6), and each asked client fails to reply
    with probability ``dropout``. The first round hears everyone: the start already needed every client (local
    starts and their alignment). The server keeps every client's last message and uses it for the clients it did
    not hear (as MIFA does, Gu et al., NeurIPS 2021; incremental EM for the pooled methods, Neal & Hinton 1998), so
    FedGrEM's central problem still sees every client, outliers included; clients not heard keep their parameters
    until they are next asked.

    Parameters
    ----------
    fraction : float in (0, 1]
    dropout : float in [0, 1)
    random_state : int, RandomState or None
    """

    def __init__(self, fraction=1.0, dropout=0.0, random_state=None):
        self.fraction, self.dropout = fraction, dropout
        self.rng = check_random_state(random_state)

    def __call__(self, t, K):
        """(K,) bool, the clients heard in round ``t``; None when all are."""
        if t == 1 or (self.fraction >= 1.0 and self.dropout == 0.0):
            return None
        asked = self.rng.choice(K, max(1, round(self.fraction * K)), replace=False)
        heard = np.zeros(K, dtype=bool)
        heard[asked[self.rng.random_sample(len(asked)) >= self.dropout]] = True
        return heard
