"""The clients' side of a fit in this process: what the engine asks of clients, run on their own rows.

The round engine (:mod:`fedmm.engine`) and the starts (:mod:`fedmm.initialization`) talk to clients
only through a transport with :class:`LocalClients`'s methods, so the same server code runs clients in
this process (here) or across real parties (:mod:`fedmm.flower`). Everything here sees one client's
data at a time (or, batched, several clients' side by side, each computed on alone).
"""

import contextlib
import copy
from typing import NamedTuple

import numpy as np

from .algorithms._base import em_update
from .algorithms.local import echo
from .families import MixtureParams
from .families._base import one_hot
from .reductions import largest_changes
from .protocol import Broadcast, Ledger, Transport, calls, n_floats, put, stack, take
from .robust import client_fold
from .units import pooled_moments

__all__ = ["MODES", "TRANSPORT", "LocalClients", "LocalFit", "Rowless", "strict_rows", "server_side", "as_clients",
           "fit_weights", "local_rounds", "client_change", "client_family_starts", "user_start"]

MODES = ("batched", "per-client")

#: What the server side of a fit may ask of its clients: the calls of :class:`fedmm.protocol.Transport`.
TRANSPORT = calls(Transport)

_strict = [False]


def user_start(family, data, weights, theta):
    """A start from given weights (K, R) or (R,) and parameters (K, R, p) or (R, p).

    Variances are those that maximize Q-hat at ``theta`` when every sample
    goes to its most probable component under unit variances (fixed ones stay
    fixed). Hard assignment, because the data are in standard units
    (:mod:`fedmm.units`), where a unit variance can be much wider than a
    component, and soft responsibilities would then mix the components and
    inflate every variance.
    """
    K = data.n_clients
    theta = np.asarray(theta, dtype=float)
    R, p = theta.shape[-2:]
    if theta.ndim == 2:
        theta = np.broadcast_to(theta, (K, R, p)).copy()
    weights = np.full((K, R), 1.0 / R) if weights is None else np.asarray(weights, dtype=float)
    if weights.ndim == 1:
        weights = np.broadcast_to(weights, (K, R)).copy()
    if theta.shape != (K, R, p) or weights.shape != (K, R):
        raise ValueError(f"Initial parameters must have shape (R, p) or (K, R, p) = ({K}, {R}, {p}) and "
                         f"weights (R,) or (K, R); got {theta.shape} and {weights.shape}.")
    if not (np.all(np.isfinite(theta)) and np.all(weights > 0) and np.allclose(weights.sum(axis=1), 1.0)):
        raise ValueError("Initial weights must be positive and sum to 1 on every client, "
                         "and initial parameters finite.")
    unit = MixtureParams(weights, theta, np.ones((K, R, 1)))
    nearest = one_hot(family.log_resp(data, unit)[1].argmax(axis=1), R)
    return unit._replace(scale=family.update_scale(family.stats_from_resp(data, nearest), theta))


def client_family_starts(family, data, n_components, seeds):
    """The clients' starts, each from its own rows and seed: the family's starting responsibilities
    (k-means for Gaussians, a random partition for regressions), then one M-step.

    A seed per client (drawn by the server from ``random_state``) rather than one generator passed
    from client to client: a client's start then depends on its own data only, as it must when the
    clients are separate parties, and all clients' starts can be made in one batched call
    (:meth:`~fedmm.families.Family.initial_resp_clients`) with the numbers each would make alone.
    """
    resp = family.initial_resp_clients(data, n_components, seeds)
    return em_update(family, family.stats_from_resp(data, resp), data.n_samples)


class LocalFit(NamedTuple):
    """The rounds every client of a method that runs on its own (:attr:`~fedmm.algorithms.Strategy.local`) ran
    alone (:func:`local_rounds`): what it replies to the query ``local``.

    Attributes
    ----------
    params : MixtureParams
        (K, ...) each client's parameters after its last round.
    n_iter : ndarray of shape (K,)
        Its rounds.
    converged : ndarray of shape (K,)
        Whether its stopping rule held before ``max_iter``.
    loglik : ndarray of shape (K,)
        Its log-likelihood at ``params``.
    trace : ndarray of shape (K, T)
        Its log-likelihood at each round's parameters (the E-step's), its last after it stopped.
    moved : ndarray of shape (K, T)
        Its largest parameter change in each round, 0 after it stopped.
    """

    params: MixtureParams
    n_iter: np.ndarray
    converged: np.ndarray
    loglik: np.ndarray
    trace: np.ndarray
    moved: np.ndarray


def local_rounds(strategy, family, data, broadcast, max_iter, tol, mode="batched"):
    """Every client's rounds of a method that runs on its own from its start ``broadcast``, each client as if
    alone: a :class:`LocalFit`.

    After its start such a method's server only sends each client its own message back (:func:`echo`), so the
    client computes that itself and needs no round trip: a round is :meth:`~fedmm.algorithms.Strategy.client_step`
    from the client's own last parameters, and the client stops at its own stopping rule (the engine's,
    :class:`fedmm.engine._Pass`, on one client: the first round whose ``strategy.stop_on`` change is below
    ``tol``), as scikit-learn's ``GaussianMixture`` fitted on its rows alone would. In this process all clients
    step side by side, each on its own rows; a client that stopped (or diverged) is not stepped again.
    """
    K, n_k = data.n_clients, data.n_samples
    state = _clients(lambda d, p: strategy.client_start(p, d.n_samples), data, mode, broadcast.params)
    params = broadcast.params
    n_iter, converged = np.zeros(K, dtype=int), np.zeros(K, dtype=bool)
    loglik, previous, trace, moved = np.zeros(K), np.full(K, np.nan), [], []
    active = np.arange(K)
    step = lambda d, s, b: strategy.client_step(family, d, s, b)  # noqa: E731
    with np.errstate(over="ignore", invalid="ignore"):
        while active.size and len(trace) < max_iter:
            everyone = active.size == K
            part = (lambda tree: tree) if everyone else (lambda tree: take(tree, active))  # noqa: E731
            messages, states = _clients(step, data if everyone else data.clients(active), mode, part(state),
                                        part(broadcast))
            old, new = part(params), echo(messages).params
            # The first round hears everyone: its states carry what the start sent (a prior) wholesale.
            state = states if everyone else put(state, active, states)
            params = new if everyone else put(params, active, new)
            broadcast = Broadcast(params)
            loglik[active], mean_ll, change = messages.loglik, messages.loglik / n_k[active], client_change(new, old)
            trace.append(loglik.copy())
            moved.append(np.zeros(K))
            moved[-1][active] = change
            calm = change < tol if strategy.stop_on == "parameter_change" else np.abs(mean_ll - previous[active]) < tol
            previous[active] = mean_ll
            n_iter[active] = len(trace)
            converged[active] = calm
            active = active[~calm & np.isfinite(mean_ll) & np.isfinite(change)]
    return LocalFit(params, n_iter, converged, family.loglik(data, params), np.array(trace).T, np.array(moved).T)


def client_change(new, old):
    """(K,) each client's largest change of a weight or parameter coordinate between ``old`` and ``new``."""
    return np.maximum(largest_changes(new.theta, old.theta), np.abs(new.weights - old.weights).max(axis=1))


def _clients(fn, data, mode, *trees):
    """``fn(data, *trees)`` for all clients at once, or client by client with the results stacked."""
    if mode == "batched":
        return fn(data, *trees)
    replies = [fn(data.client_data(k), *(take(t, k) for t in trees)) for k in range(data.n_clients)]
    if type(replies[0]) is tuple:  # several results (a plain tuple, not a message): stack each
        return tuple(stack(list(part)) for part in zip(*replies))
    return stack(replies)


class LocalClients:
    """Clients whose data are in this process: what the engine asks of clients, run on their rows.

    The engine talks to clients only through this interface (``start``, ``step``, ``loglik``,
    ``fit_weights``, ``n_samples``, ``data_scale``), so another transport with the same methods runs the
    same fit across real parties (:mod:`fedmm.flower`). Each client keeps its
    :class:`~fedmm.protocol.ClientState` between rounds, here in one stacked tree.

    Parameters
    ----------
    family : Family
    data : FederatedData
    mode : {"batched", "per-client"}
        One ``client_step`` over the contiguous array (the fast path), or one per client on its own rows.
    ledger : Ledger, optional
        Where the queries are recorded (:class:`fedmm.protocol.Ledger`; a new one by default).
    """

    #: Every client asked replies (a remote one may not, :mod:`fedmm.flower`): a pass need not keep the last
    #: round's replies for those it does not hear (:meth:`fedmm.engine._Pass.rounds`).
    all_reply = True

    def __init__(self, family, data, mode="batched", ledger=None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
        self.family, self.data, self.mode = family, data, mode
        self.states = {}   # each run's client states, by slot (fedmm.engine.drive)
        self.folds = None
        self._scale = (None, None)   # the data the data scale is of, and it
        # What each query would send across parties (fedmm.flower's queries, one to one): the fit's communication_.
        self.ledger = Ledger(data.n_clients) if ledger is None else ledger

    @property
    def n_samples(self):
        """(K,) the clients' sample sizes."""
        return self.data.n_samples

    @property
    def n_clients(self):
        return self.data.n_clients

    @property
    def data_scale(self):
        """The largest absolute value in any client's data (features or response): the divergence check's unit.
        Once per data: every pass of a fit asks it (two passes over 400 MB of rows at 10^5 clients)."""
        if self._scale[0] is not self.data:
            self._scale = (self.data, data_scale(self.data.X, self.data.y))
        return self._scale[1]

    def start(self, strategy, params):
        """Every client takes its state from the start ``params`` (``strategy.client_start``)."""
        self.start_runs([(0, strategy, params)])

    def step(self, strategy, broadcast, heard=None):
        """The messages of the clients ``heard`` (index array; None: all) to their rows of ``broadcast``.

        Returns ``(messages, replied)``: the replies stacked, and the clients they came from, in order (in
        process every client asked replies).
        """
        return self.step_runs([(0, strategy, broadcast, heard, None)])[0]

    def loglik(self, params):
        """(K,) every client's log-likelihood at its row of ``params``."""
        return self.loglik_runs([(0, params)])[0]

    def start_runs(self, runs):
        """:meth:`start` for several runs side by side in one query (:func:`fedmm.engine.drive`): ``runs``, a list
        of ``(slot, strategy, params)``; each client keeps each run's state in its slot."""
        for slot, strategy, params in runs:
            self._start(slot, strategy, params)
        self._record("start", None, [params for _, _, params in runs], 0, runs[0][1])
        return [None] * len(runs)

    def _start(self, slot, strategy, params):
        self.states[slot] = _clients(lambda d, p: strategy.client_start(p, d.n_samples), self.data, self.mode, params)

    def step_runs(self, runs):
        """:meth:`step` for several runs side by side in one query: ``runs``, a list of ``(slot, strategy,
        broadcast, heard, start)``, ``start`` None or a run's ``(strategy, params)`` that the clients start
        from first (:meth:`start`, sent with the run's first round); a list of ``(messages, replied)``."""
        answers = []
        for slot, strategy, broadcast, heard, start in runs:
            if start is not None:
                self._start(slot, *start)
            step = lambda d, s, b: strategy.client_step(self.family, d, s, b)  # noqa: E731
            if heard is None:
                messages, self.states[slot] = _clients(step, self.data, self.mode, self.states[slot], broadcast)
            else:
                messages, states = _clients(step, self.data.clients(heard), self.mode, take(self.states[slot], heard),
                                            take(broadcast, heard))
                self.states[slot] = put(self.states[slot], heard, states)
            answers.append((messages, np.arange(self.n_clients) if heard is None else heard))
        sent = [[broadcast.params] + ([] if start is None else [start[1]]) for _, _, broadcast, _, start in runs]
        self._record_runs("step", [(heard, down, messages) for (_, _, _, heard, _), down, (messages, _)
                                   in zip(runs, sent, answers)], runs[0][1])
        return answers

    def loglik_runs(self, runs):
        """:meth:`loglik` for several runs side by side in one query: ``runs``, a list of ``(slot, params)``."""
        return self._loglik_asked(runs)()

    def _loglik_asked(self, runs):
        """Record the query :meth:`loglik_runs`; its answers when called (:meth:`together` calls it last)."""
        self._record("loglik", None, [params for _, params in runs], len(runs))
        return lambda: [_clients(lambda d, p: self.family.loglik(d, p), self.data, self.mode, params)
                        for _, params in runs]

    def local(self, strategy, broadcast, max_iter, tol):
        """Every client runs its own rounds of ``strategy`` (a method that runs on its own) from ``broadcast``:
        a :class:`LocalFit` (:func:`local_rounds`)."""
        return self.local_runs([(strategy, broadcast, max_iter, tol)])[0]

    def local_runs(self, runs):
        """Every client's own rounds of several runs of methods that run on their own, in one query: ``runs``, a
        list of ``(strategy, broadcast, max_iter, tol)``; a list of :class:`LocalFit` (:func:`local_rounds`)."""
        fits = [local_rounds(strategy, self.family, self.data, broadcast, max_iter, tol, self.mode)
                for strategy, broadcast, max_iter, tol in runs]
        # Each client replies with its parameters, three numbers and its own rounds' two traces.
        up = sum(_per_client(fit.params) + 3 + 2 * fit.n_iter for fit in fits)
        self.ledger.record("local", None, 8 * _per_client([broadcast.params for _, broadcast, _, _ in runs]), 8 * up,
                           method=_method(runs[0][0]))
        return fits

    def together(self, batch):
        """Queries of several kinds in one message (:func:`fedmm.engine.drive`): ``batch``, ``{kind: [arguments]}``
        with kinds among ``start``, ``step``, ``loglik``, ``local`` (the arguments of their ``_runs`` calls),
        ``fit_weights`` and ``family_starts`` (one call's each); ``{kind: [answers]}``, recorded as one query
        (:meth:`Ledger.joined`). Log-likelihoods are computed last, where the message's rounds or refits took an
        E-step at their parameters from it (:func:`_remembering`)."""
        family = self.family
        self.family = _remembering(family, self.data, [params for _, params in batch.get("loglik", [])])
        try:
            with self.ledger.joined():
                answers = {kind: self._loglik_asked(asks) if kind == "loglik"
                           else getattr(self, f"{kind}_runs")(asks) if kind in ("start", "step", "local")
                           else [getattr(self, kind)(*ask) for ask in asks] for kind, asks in batch.items()}
            return {kind: answer() if kind == "loglik" else answer for kind, answer in answers.items()}
        finally:
            self.family = family

    def moments(self):
        """The pooled moments of the clients' data (:func:`fedmm.units.pooled_moments`): sums the server adds."""
        shapes = self.family.moment_shapes(self.data.X.shape[1]).values()
        self._record("hello", None, 0, sum(int(np.prod(shape)) for shape in shapes))
        return pooled_moments(self.data)

    def set_units(self, units, scale_reply=True):
        """Every client moves its data into the fit's standard units and the family's design, and replies with
        its data's scale (the divergence check's unit), unless ``scale_reply`` is False (a private fit, where
        it would be a release: :mod:`fedmm.privacy`)."""
        d = len(units.x_shift)
        self._record("units", None, d + units.x_map.size + 2, int(scale_reply))
        data = units.transform(self.data)
        self.data = data.with_X(self.family.design(data.X))

    def whitened_sums(self, params, radius, which=None):
        """The clients' (``which``: those only) E-step sums about their rows of ``params`` in the components'
        own units, each row's deviations within ``radius`` (:meth:`fedmm.families.GaussianFamily.whitened_sums`:
        a private round at the level of samples, :mod:`fedmm.privacy`)."""
        data = self.data if which is None else self.data.clients(np.asarray(which))
        sums = self.family.whitened_sums(data, params, radius)
        self._record("sums", which, params, sums)
        return sums

    def family_starts(self, seeds, n_components, which=None, features=None):
        """The clients' :func:`client_family_starts` from their seeds (``which``: those clients only; ``features``:
        on those features of their rows only, ``init="screened"``); a ``ValueError`` naming the first client with
        fewer than ``n_components`` samples, which cannot make one."""
        index = np.arange(self.n_clients) if which is None else np.asarray(which)
        small = index[self.n_samples[index] < n_components]
        if small.size:
            k = small[0]
            raise ValueError(f"client {k} has {self.n_samples[k]} samples, fewer than n_components={n_components}, "
                             "so it cannot make its own start (init='family' or 'local-em' start every client from "
                             "its own data); use init='common', or give initial values (weights_init and means_init "
                             "/ coef_init).")
        data = self.data if which is None else self.data.clients(index)
        data = data if features is None else data.with_X(np.ascontiguousarray(data.X[:, features]))
        starts = client_family_starts(self.family, data, n_components, seeds)
        self._record("family_start", which, 0 if features is None else len(features), starts)
        return starts

    def user_start(self, weights, theta):
        """The start from given parameters, its variances fitted by each client (:func:`user_start`)."""
        start = user_start(self.family, self.data, weights, theta)
        self._record("user_start", None, start[:2], start)
        return start

    def fit_weights(self, params, which=None, max_iter=100, tol=1e-3):
        """The clients ``which`` (bool mask) refit their proportions to ``params`` (:func:`fit_weights`)."""
        self._record("fit_weights", None, n_floats(params) // self.n_clients + 1, params.weights)
        return fit_weights(self.family, self.data, params, which, max_iter, tol)

    def deal_folds(self, n_folds, seeds):
        """Every client deals its rows into ``n_folds`` folds from its own seed (:func:`fedmm.robust.client_fold`)."""
        self._record("folds", None, 0, 0)
        self.folds = np.concatenate([client_fold(n, n_folds, seed) for n, seed in zip(self.n_samples, seeds)])

    def training(self, fold):
        """The clients' rows outside ``fold``, as clients of their own
        (:func:`fedmm.algorithms.tuning.select_penalty`)."""
        return LocalClients(self.family, self._fold_rows(self.folds != fold), self.mode, self.ledger)

    def held_out_loglik(self, fold, params):
        """(K,) every client's log-likelihood of its rows in ``fold`` at its row of ``params`` (0 with none)."""
        held = self._fold_rows(self.folds == fold)
        self._record("held_out", np.flatnonzero(held.n_samples), params, 1)
        return self.family.loglik(held, params)

    def _record(self, action, index, down, up, strategy=None):
        """Record query ``action`` to the clients ``index`` (None: all) in :attr:`ledger`: ``down`` and ``up`` are
        what each client is sent and replies, as a tree of all the clients' rows (so many numbers each), a list of
        such trees (runs side by side, :func:`fedmm.engine.drive`) or a number of floats per client; ``strategy``,
        the method whose start or round it is."""
        self.ledger.record(action, index, 8 * _per_client(down), 8 * _per_client(up), method=_method(strategy))

    def _record_runs(self, action, parts, strategy):
        """Record one query of runs side by side, ``parts`` a list of ``(index, down, up)`` as in :meth:`_record`,
        one per run: each client asked by any run is sent, and replies, its parts of all the runs that asked it."""
        down, up = np.zeros(self.n_clients, dtype=np.int64), np.zeros(self.n_clients, dtype=np.int64)
        asked = np.zeros(self.n_clients, dtype=bool)
        for index, sent, replied in parts:
            index = slice(None) if index is None else index
            down[index] += _per_client(sent)
            up[index] += _per_client(replied)
            asked[index] = True
        index = np.flatnonzero(asked)
        self.ledger.record(action, index, 8 * down[index], 8 * up[index], method=_method(strategy))

    def _fold_rows(self, mask):
        client = np.repeat(np.arange(self.n_clients), self.n_samples)
        return self.data.take_rows(np.flatnonzero(mask), np.bincount(client[mask], minlength=self.n_clients))


def _remembering(family, data, asked):
    """A copy of ``family`` whose E-steps on ``data`` at parameters in ``asked`` (the log-likelihood queries of one
    message, :meth:`LocalClients.together`) keep their log-likelihoods, and whose log-likelihoods there are those
    (the same numbers, from the same kernel pass): the pooled start's candidates and finalists are asked theirs
    with a round or a refit from the same parameters, one E-step over all rows where two were taken."""
    if not asked:
        return family
    known = []
    at = lambda d, params: d is data and any(all(a is b for a, b in zip(params, p)) for p in asked)  # noqa: E731

    def remembered(method):    # an E-step: its log-likelihoods first
        def call(d, params):
            out = method(d, params)
            if at(d, params):
                known.append((params, out[0]))
            return out
        return call

    def loglik(d, params):
        same = [ll for p, ll in known if d is data and all(a is b for a, b in zip(params, p))]
        return same[0].copy() if same else family.loglik(d, params)

    remembering = copy.copy(family)   # a copy, not a wrapper: client code asks isinstance of families
    remembering.estep = remembered(family.estep)
    remembering.responsibility_sums = remembered(family.responsibility_sums)
    remembering.loglik = loglik
    return remembering


def _method(strategy):
    """The name a ledger gives the method whose start or round a query is."""
    return "" if strategy is None else strategy.name or type(strategy).__name__


def _per_client(part):
    """Floats per client of ``part``: a tree (or array) with a leading client axis, a list of them (summed), or
    already a number."""
    if part is None:
        return 0
    if isinstance(part, list):
        return sum(_per_client(p) for p in part)
    if not isinstance(part, tuple) and np.ndim(part) == 0:
        return int(part)
    rows = part[0] if isinstance(part, tuple) else part
    return n_floats(part) // max(len(rows), 1)


class Rowless:
    """In-process clients as the server side may see them: their :data:`TRANSPORT`, never their rows.

    What a fit across separate parties is limited to (:mod:`fedmm.flower`), in one process: server-side code
    that reaches for the rows (a start that pools them) fails here as it would across parties, instead of
    silently working in one process only. In-process fits use it inside :func:`strict_rows`.
    """

    def __init__(self, clients):
        self._clients = clients

    def __getattr__(self, name):
        if name not in TRANSPORT:
            raise AttributeError(f"{name!r}: the server side reaches the clients through their transport only "
                                 f"({', '.join(TRANSPORT)}), never their rows (fedmm.clients.strict_rows).")
        value = getattr(self._clients, name)
        return (lambda fold: Rowless(value(fold))) if name == "training" else value


@contextlib.contextmanager
def strict_rows():
    """Within this context every in-process fit runs its server side on :class:`Rowless` clients: the test that
    a method's path is federated, short of running it on Flower."""
    before, _strict[0] = _strict[0], True
    try:
        yield
    finally:
        _strict[0] = before


def server_side(clients):
    """``clients`` as the server side of a fit sees them: :class:`Rowless` inside :func:`strict_rows`."""
    return Rowless(clients) if _strict[0] else clients


def as_clients(family, data, mode="batched"):
    """``data`` itself when it is a transport of clients, else :class:`LocalClients` over it."""
    return data if hasattr(data, "step") else LocalClients(family, data, mode)


def fit_weights(family, data, params, clients=None, max_iter=100, tol=1e-3):
    """EM on the mixing proportions only, the components fixed (FedEM Sec. 2.2 / 3.2).

    Client-side only: updates ``w = N / n_k`` for the clients in ``clients``
    (a boolean mask; all by default), each until its own mean log-likelihood
    per sample changes by less than ``tol`` (so a client's answer does not
    depend on the others'). Used to personalize a new client, and to give a
    client restarted from the consensus proportions that fit its data.
    """
    n_k, K = data.n_samples, data.n_clients
    active = np.ones(K, dtype=bool) if clients is None else np.array(clients, dtype=bool)
    weights, previous = params.weights, np.full(K, np.nan)
    for t in range(max_iter):
        index = np.flatnonzero(active)
        if not index.size:
            break
        loglik, N = _sums_of(family, data, params._replace(weights=weights), index)
        weights = weights.copy()
        weights[index] = N / n_k[index, None]
        mean_ll = loglik / n_k[index]
        if t:
            active[index] = np.abs(mean_ll - previous[index]) >= tol
        previous[index] = mean_ll
    return weights


def _sums_of(family, data, params, index):
    """The log-likelihoods and responsibility sums of the clients ``index`` (positions) alone, each on its own rows
    (the numbers it gives among all the clients): a refit that a few clients still run costs their rows only."""
    if index.size == data.n_clients:
        return family.responsibility_sums(data, params)
    return family.responsibility_sums(data.clients(index), params.take(index))


def data_scale(X, y=None):
    """``max |X| + max |y|``: the unit of the divergence check (:func:`fedmm.engine.run_rounds`), here and on a
    remote client. ``max |a|`` as ``max(a.max(), -a.min())``: ``np.abs`` would copy all the data (400 MB and
    1.3 s per run with 10^5 clients of 50 samples)."""
    return sum(max(a.max(), -a.min()) for a in (X, y) if a is not None)
