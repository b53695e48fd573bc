"""The round engine: rounds, stopping rules, restarts and multiple starts, above every strategy.

A round sends the server's :class:`~fedmm.protocol.Broadcast` to the clients, runs every client's
``client_step`` and hands the stacked :class:`~fedmm.protocol.ClientMessage` to ``server_step``
(``docs/architecture.md``). Two modes give the same numbers:

- ``"batched"``: all clients in one ``client_step`` over the contiguous data array (one kernel call per round:
  the fast path);
- ``"per-client"``: one ``client_step`` per client on its own rows, the messages stacked for the server: what a
  deployment with separate parties does.

The loop, the stopping rule, the divergence check and the restarts a strategy asks for
(:meth:`~fedmm.algorithms.Strategy.restart`) live here once.
"""

import copy
import itertools
import sys
import time
import warnings
from typing import NamedTuple

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .algorithms import GradientStrategy
from .clients import LocalClients, as_clients, client_change, fit_weights
from .families import MixtureParams
from .protocol import put, take
from .robust import first_best

__all__ = ["DivergenceError", "FitResult", "Progress", "LocalClients", "run_rounds", "run",
           "fit_restarts", "fit_weights", "drive", "passes", "single_pass", "best_of_starts", "side_by_side"]


#: A pass's tail: at most this fraction of the clients still moving. There a pass that a restart follows
#: leaves them to the restart (FedGrEM), and a per-client strategy's calm clients stop (:class:`_Pass`).
DEFER = 0.01


class DivergenceError(RuntimeError):
    """An estimation run produced non-finite parameters or log-likelihood."""


class FitResult(NamedTuple):
    """One fit's outcome.

    Attributes
    ----------
    params : MixtureParams
    n_iter : int
        Rounds over all passes of the kept run.
    converged : bool
    history : dict
        Per-round records: name -> array of length ``n_iter``.
    loglik : ndarray of shape (K,)
        Each client's log-likelihood at ``params``.
    diagnostics : NamedTuple or None
        The strategy's account of the run (:meth:`~fedmm.algorithms.Strategy.diagnostics`).
    restarts : int
        Restart passes whose outcome was kept (:meth:`~fedmm.algorithms.Strategy.restart`).
    restarted : ndarray of int
        Clients that kept a restart.
    start : int
        :func:`fit_restarts`: the start with the best total log-likelihood.
    own_fit : ndarray of int
        Clients given their own fit instead (:meth:`~fedmm.algorithms.Strategy.own_fits`).
    """

    params: MixtureParams
    n_iter: int
    converged: bool
    history: dict
    loglik: np.ndarray
    diagnostics: tuple | None = None
    restarts: int = 0
    restarted: np.ndarray = np.array([], dtype=int)
    start: int = 0
    own_fit: np.ndarray = np.array([], dtype=int)


class Progress:
    """What a fit prints while it runs (the estimators' ``verbose``, scikit-learn's convention).

    ``verbose=0`` prints nothing; ``1`` one line per run (start, restart pass) when it ends; ``2`` also every
    ``interval`` rounds, with the round's records (log-likelihood per sample, parameter change, and the strategy's
    own, e.g. FedGrEM's penalty and pooled fraction). ``offset`` is added to printed log-likelihoods per sample, so
    that they read in the data's units when the fit runs in standard ones.
    """

    def __init__(self, verbose=0, interval=10, offset=0.0, stream=None):
        self.verbose, self.interval, self.offset, self.stream = verbose, interval, offset, stream
        self.label, self._since = "", 0.0

    def _print(self, text):
        print(text, file=self.stream or sys.stdout, flush=True)

    def begin(self, label):
        """A new run starts; ``label`` names it in the lines that follow."""
        self.label, self._since = label, time.perf_counter()

    def run(self, label):
        """A copy for one of several runs side by side (:func:`drive`), begun as ``label``."""
        run = copy.copy(self)
        run.begin(label)
        return run

    def round(self, t, record):
        if self.verbose >= 2 and t % self.interval == 0:
            record = {**record, "log_likelihood": record["log_likelihood"] + self.offset}
            self._print(f"  {self.label}, round {t}: " + ", ".join(f"{k} {v:.6g}" for k, v in record.items()))

    def end(self, t, converged, loglik_per_sample):
        if self.verbose >= 1:
            state = "converged" if converged else "stopped at max_iter"
            self._print(f"{self.label}: {state} after {t} rounds ({time.perf_counter() - self._since:.2f} s), "
                        f"log-likelihood per sample {loglik_per_sample + self.offset:.6g}")


#: The progress of a fit nobody watches.
SILENT = Progress(0)


def run_rounds(strategy, family, data, start, max_iter, tol, mode="batched", progress=SILENT, participation=None):
    """Rounds of ``strategy`` from ``start`` until ``max_iter`` or the stopping rule.

    ``data`` is a :class:`~fedmm.data.FederatedData` (run in this process, in ``mode``) or a transport of
    clients with :class:`LocalClients`'s methods (:mod:`fedmm.flower`). A transport may hear fewer
    clients than it asked (a reply lost or rejected): they count as not heard.

    Stops when the quantity named by ``strategy.stop_on`` changed by less than ``tol`` in a round: no client's
    mean log-likelihood per sample (scikit-learn's rule, client by client), or no weight or parameter
    coordinate of any client. ``participation`` (:class:`Participation`) picks the clients each round hears;
    the server reuses the last message of the others. Every round records its communication
    (:meth:`~fedmm.algorithms.Strategy.communication`) in ``history``.

    A run of an ascent strategy that ends with a lower total log-likelihood than its start draws a
    :class:`sklearn.exceptions.ConvergenceWarning`.

    Raises
    ------
    DivergenceError
        Naming the clients whose parameters or log-likelihood became
        non-finite, or whose parameters left every plausible range (1e8 times
        the size of the data they were fitted on).
    """
    clients = as_clients(family, data, mode)
    return drive(clients, [_Pass(strategy, family, clients, start, participation).rounds(max_iter, tol, progress)])[0]


def drive(clients, runs):
    """Run the generators ``runs`` side by side on ``clients``: the values they return, in order.

    A run (:meth:`_Pass.rounds`, :func:`run`) yields what it asks of the clients, ``(query, *arguments)``
    (the transport's call of that name), and is sent the answer; it may also yield ``("spawn", [runs])``,
    runs of its own to go side by side with the others, and is sent their values, or ``("together", [asks])``,
    queries of different kinds at once, and is sent their answers. Whatever the runs waiting ask at once, of any
    kinds, goes in one message to each client (:meth:`fedmm.clients.LocalClients.together`; each run keeps its
    clients' states in a slot of its own), and a run's ``"start"`` goes with its first round: ten candidate starts
    of five rounds cost five round trips, not sixty, across parties, and give the numbers they give one after
    another. At most :func:`side_by_side` runs go at once (each holds a state per client); the others wait.
    A transport without those calls (a private fit's, :mod:`fedmm.privacy`) runs them one after another.
    """
    if not hasattr(clients, "together"):
        return [_drive_alone(clients, run) for run in runs]
    width = side_by_side(clients.n_clients)
    results = [None] * len(runs)
    running, owner, pending = {}, {}, {}    # by slot: the run, whose value it is, what it asks
    # Runs waiting for a slot: (run, whose value it is, what to send it). A run that spawns gives up its slot (a
    # pass never spans a spawn) and waits, in ``spawned``, for its runs' values.
    waiting = [(run, (None, i), None) for i, run in enumerate(runs)]
    spawned, serial = {}, itertools.count()
    starting = {}                           # by slot: the start a run's next query carries

    def done(whose, value):
        up, position = whose
        if up is None:
            results[position] = value
            return
        run, whose_up, values, left = spawned[up]
        values[position] = value
        if left == 1:
            del spawned[up]
            waiting.insert(0, (run, whose_up, values))
        else:
            spawned[up] = (run, whose_up, values, left - 1)

    def advance(slot, answer):
        try:
            ask = running[slot].send(answer)
            while ask[0] == "start":    # sent with the run's next query (its first round's, as a rule)
                starting[slot] = ask[1:]
                ask = running[slot].send(None)
        except StopIteration as stop:
            del running[slot]
            done(owner.pop(slot), stop.value)
            return
        if ask[0] == "spawn":
            key = next(serial)
            spawned[key] = (running.pop(slot), owner.pop(slot), [None] * len(ask[1]), len(ask[1]))
            waiting[:0] = [(run, (key, j), None) for j, run in enumerate(ask[1])]
        else:
            pending[slot] = ask

    while waiting or pending:
        while waiting and len(running) < width:
            slot = min(set(range(width)) - set(running))
            running[slot], owner[slot], answer = waiting.pop(0)
            advance(slot, answer)
        if not pending:
            continue
        asking, batch = _batch(pending, starting)
        pending.clear()
        answers = clients.together(batch)
        for slot, where, several in asking:
            mine = [answers[kind][position] for kind, position in where]
            advance(slot, mine if several else mine[0])
        answers = mine = None   # the runs hold what they keep: not through the next message's replies
    return results


#: How many client states runs side by side may hold at once (:func:`side_by_side`).
STATES_AT_ONCE = 100_000


def side_by_side(n_clients):
    """How many runs :func:`drive` runs at once for ``n_clients`` clients: each holds a state per client, so as
    many as keep ``STATES_AT_ONCE`` states (ten candidate starts of 10,000 clients; one at a time from 100,000,
    where memory, not round trips, is what a fit runs short of)."""
    return max(1, STATES_AT_ONCE // max(n_clients, 1))


def _batch(pending, starting):
    """What the runs ``pending`` ask, by slot, as one message (``(asking, batch)``, ``batch`` for ``together``): per
    run ``(slot, where, several)``, ``where`` its answers' ``(kind, position)``, ``several`` if it asked several
    queries; a round and a log-likelihood name the run's slot (its clients' states). A run's start goes with its
    round when that round asks every client, else as a part of its own."""
    alone = [slot for slot, ask in pending.items() if slot in starting and (ask[0] != "step" or ask[3] is not None)]
    batch, asking = {"start": [(slot, *starting.pop(slot)) for slot in alone]} if alone else {}, []
    for slot, ask in pending.items():
        where = []
        for kind, *arguments in (ask[1] if ask[0] == "together" else [ask]):
            slotted = {"step": [slot, *arguments, starting.pop(slot, None)], "loglik": [slot, *arguments]}
            batch.setdefault(kind, []).append(tuple(slotted.get(kind, arguments)))
            where.append((kind, len(batch[kind]) - 1))
        asking.append((slot, where, ask[0] == "together"))
    order = list(batch)   # runs get their answers kind by kind, as when each kind was a query of its own
    return sorted(asking, key=lambda ask: order.index(ask[1][0][0])), batch


def _drive_alone(clients, run):
    """One run (and those it spawns, one after another) on a transport of single-run calls."""
    answer = None
    try:
        while True:
            query, *arguments = run.send(answer)
            if query == "spawn":
                answer = [_drive_alone(clients, sub) for sub in arguments[0]]
            elif query == "together":
                answer = [getattr(clients, kind)(*more) for kind, *more in arguments[0]]
            else:
                answer = getattr(clients, query)(*arguments)
    except StopIteration as stop:
        return stop.value


class _Pass:
    """The rounds of :func:`run_rounds` from one start, which :meth:`rounds` may stop early and resume.

    :meth:`rounds` with ``restart_next`` also stops once at most ``DEFER`` of the clients still move and
    :meth:`~fedmm.algorithms.Strategy.restarting` says the restart pass that follows will start every one
    of them afresh; ``deferred`` then says so, and :func:`run` resumes the pass (the clients retake their
    state from its start, the server keeps its own) if the restart keeps none of them. A per-client
    strategy's pass, once at most ``DEFER`` of the clients still move, stops asking the calm ones.
    """

    def __init__(self, strategy, family, clients, start, participation):
        self.strategy, self.n_k, self.start, self.participation = strategy, clients.n_samples, start, participation
        self.data_scale, self.all_reply = clients.data_scale, getattr(clients, "all_reply", False)
        self.broadcast, self.server = strategy.server_start(family, start, self.n_k)
        self.params, self.history, self.previous, self.messages, self.t = start, [], None, None, 0
        self.calm = np.zeros(len(self.n_k), dtype=bool)  # clients heard since the stopping rule last failed
        self.start_loglik, self.deferred, self.also = None, False, None
        # Per-client strategies' clients solve separate problems: in the tail of a pass (at most DEFER of
        # them still moving) each calm one stops, as scikit-learn's fit on it alone would, and only the
        # others step; before it, every client steps until all are calm at once.
        self.tail = False
        # A method whose server only echoes its clients runs each client's rounds on the client, in one query.
        self.local = strategy.local and hasattr(clients, "local") and participation is None

    def rounds(self, max_iter, tol, progress, restart_next=None, also=None, first=None):
        """Rounds until the stopping rule or ``max_iter`` rounds in all; the pass so far as a :class:`FitResult`.

        A generator of the queries it asks (:func:`drive`). ``also(params)``, a query about the final parameters or
        None, goes with their log-likelihoods (answer: :attr:`also`); ``first``, the first round's replies if already
        asked."""
        strategy, n_k = self.strategy, self.n_k
        K = len(n_k)
        if self.local:
            return (yield from self._local_rounds(max_iter, tol, progress))
        yield "start", strategy, self.start
        bound = divergence_bound(self.data_scale)
        if self.deferred:  # resumed: the early stop was no evidence of calm
            self.calm[:] = False
        converged, self.deferred = False, False
        # Overflow on the way to a divergence is reported once, by _check_finite, not as numpy warnings.
        with np.errstate(over="ignore", invalid="ignore"):
            while self.t < max_iter:
                self.t = t = self.t + 1
                asked = self._asked(t, K, np.flatnonzero(~self.calm) if self.tail else None)
                if asked is None and self.all_reply:   # all reply anew: the last replies go (165 MB at 10^5 clients)
                    self.messages = replies = None
                replies, heard = first if t == 1 and first is not None else \
                    (yield "step", strategy, self.broadcast, asked) if asked is None or asked.size else (None, asked)
                everyone = self._hear(replies, heard, K)
                mask = np.zeros(K, dtype=bool)
                mask[heard] = True
                if t == 1:
                    self.start_loglik = self.messages.loglik
                self.broadcast, self.server = strategy.server_step(self.messages, self.server, t)
                new = self.broadcast.params
                _check_finite(strategy, new, self.messages.loglik, t, bound)
                mean_ll = self.messages.loglik / n_k
                moved = client_change(new, self.params)
                # Not kept in a name: until the next round's, the replies would outlive the round (165 MB at 10^5).
                self.history.append({"log_likelihood": self.messages.loglik.sum() / n_k.sum(),
                                     "parameter_change": moved.max(),
                                     **strategy.communication(*((self.messages, self.broadcast) if everyone else (
                                         take(self.messages, heard), take(self.broadcast, heard))), self.server),
                                     **strategy.round_info(self.server)})
                progress.round(t, self.history[-1])
                self.params = new
                if self._settled(t, moved, mean_ll, mask, tol, restart_next):
                    converged = True
                    break
            ask = None if also is None else also(self.params)
            diagnostics = strategy.diagnostics(self.server)
            # Only a pass stopped for a restart resumes (passes), and its first round hears all unless some sit out:
            # what no round needs again goes before the last query (the replies, the server's state: ten (K, R, p)
            # arrays beside what the query's E-steps, and a restart's refit with them, hold).
            self.messages = self.messages if self.deferred and (self.tail or self.participation is not None) else None
            self.start, self.server = (self.start, self.server) if self.deferred else (None, None)
            if ask is None:
                loglik, self.also = (yield "loglik", self.params), None
            else:
                loglik, self.also = yield "together", [("loglik", self.params), ask]
        _check_finite(strategy, self.params, loglik, self.t, bound)
        if strategy.ascent:
            _check_progress(strategy, self.start_loglik.sum(), loglik.sum())
        progress.end(self.t, converged, loglik.sum() / n_k.sum())
        return FitResult(self.params, self.t, converged, self._records(), loglik, diagnostics)

    def _local_rounds(self, max_iter, tol, progress):
        """:meth:`rounds` of a method that runs on its own (:attr:`~fedmm.algorithms.Strategy.local`): every client
        runs its rounds alone and replies once (:func:`fedmm.clients.local_rounds`); the history is the clients'
        together, each at its last values once it stopped."""
        strategy, n_k = self.strategy, self.n_k
        fit = yield "local", strategy, self.broadcast, max_iter, tol
        self.params, self.t = fit.params, int(fit.n_iter.max())
        nothing = strategy.communication(None, None, self.server)     # nothing crosses between rounds
        self.history = [{"log_likelihood": trace.sum() / n_k.sum(), "parameter_change": moved.max(), **nothing,
                         **strategy.round_info(self.server)} for trace, moved in zip(fit.trace.T, fit.moved.T)]
        for t, record in enumerate(self.history, start=1):
            progress.round(t, record)
        _check_finite(strategy, self.params, fit.loglik, self.t, divergence_bound(self.data_scale))
        if strategy.ascent:
            _check_progress(strategy, fit.trace[:, 0].sum(), fit.loglik.sum())
        converged = bool(fit.converged.all())
        progress.end(self.t, converged, fit.loglik.sum() / n_k.sum())
        return FitResult(self.params, self.t, converged, self._records(), fit.loglik, strategy.diagnostics(self.server))

    def _records(self):
        """The history as :class:`FitResult` holds it: each record's name -> an array over the rounds."""
        return {key: np.array([h[key] for h in self.history]) for key in self.history[0]}

    def _settled(self, t, moved, mean_ll, heard, tol, restart_next):
        """The stopping rule after round ``t``: whether every client is now calm.

        A client moves while the quantity ``strategy.stop_on`` names changed by ``tol`` or more in the round (its
        largest parameter change ``moved``, or its mean log-likelihood ``mean_ll``); clients the strategy has set
        apart (:meth:`~fedmm.algorithms.Strategy.may_keep_moving`) are not waited for while they are few. A pass
        stops after calm rounds that heard every client (``heard``: those this one did); in its tail, a pass a
        restart follows (``restart_next``) stops once only the clients that restart still move (``deferred``), and
        a per-client strategy's calm clients stop one by one.
        """
        strategy, n_k = self.strategy, self.n_k
        K = len(n_k)
        if strategy.stop_on == "parameter_change":
            moving = moved >= tol
        else:
            moving = np.ones(K, dtype=bool) if self.previous is None else np.abs(mean_ll - self.previous) >= tol
        self.previous = mean_ll
        if 0 < 3 * moving.sum() < K:  # only a few move: are they clients the strategy has set apart?
            apart = strategy.may_keep_moving(strategy.diagnostics(self.server), self.params, n_k)
            if apart is not None:
                moving &= ~apart
        calm_round = not moving.any()
        tail = t > 1 and moving.sum() <= DEFER * K
        if not calm_round and restart_next is not None and tail:
            # Rounds that move only a few clients, all of which the next pass starts afresh, are spent on states it
            # replaces; the pass resumes if it keeps none of them.
            fresh = strategy.restarting(strategy.diagnostics(self.server), restart_next)
            self.deferred = calm_round = fresh is not None and not (moving & ~fresh).any()
        self.tail = self.tail or (tail and strategy.per_client and self.participation is None)
        if self.tail:
            self.calm |= ~moving
        else:
            # A round that heard few clients says little about the rest.
            self.calm = self.calm | heard if calm_round else np.zeros(K, dtype=bool)
        return self.calm.all()

    def _asked(self, t, K, asked=None):
        """The clients round ``t`` asks (None: all): ``asked`` when given, else those ``participation`` picks."""
        if asked is None and self.participation is not None:
            mask = self.participation(t, K)
            asked = None if mask is None or mask.all() else np.flatnonzero(mask)
        return asked

    def _hear(self, replies, heard, K):
        """One round's replies merged into the server's messages; whether every client was heard."""
        everyone = heard.size == K
        if everyone:
            self.messages = replies
        elif heard.size:
            if self.messages is None:
                raise RuntimeError("The first round of a run must hear every client: the server has no "
                                   "earlier message to use for the others.")
            self.messages = put(self.messages, heard, replies)
        return everyone


def run(strategy, family, data, start, max_iter, tol, mode="batched", progress=SILENT, participation=None):
    """Rounds from ``start``, then the further passes the strategy asks for.

    After each pass the engine asks :meth:`~fedmm.algorithms.Strategy.restart` for a new start and the clients to refit
    their proportions to it (:func:`fit_weights`); runs it; keeps it for the clients
    :meth:`~fedmm.algorithms.Strategy.keep_restart` accepts; and, when some refuse, settles the mixed state with one
    more pass. A pass that a restart follows may stop while the few clients it would start afresh still move
    (:class:`_Pass`); if none of them keeps the restart, that pass resumes.
    """
    clients = as_clients(family, data, mode)
    return drive(clients, [passes(strategy, family, clients, start, max_iter, tol, progress, participation)])[0]


def passes(strategy, family, clients, start, max_iter, tol, progress=SILENT, participation=None):
    """:func:`run` as a generator of its queries (:func:`drive`)."""
    current = _Pass(strategy, family, clients, start, participation)
    ask = _RestartAsk(strategy, current, 1, 0, max_iter, tol)
    result = yield from current.rounds(max_iter, tol, progress, restart_next=1, also=ask)
    done, label = [result], progress.label
    # The passes share max_iter rounds, as scikit-learn's n_iter_ never exceeds max_iter (before, a restart pass
    # and its settling pass had max_iter each): a restart needs a round for itself and one to settle.
    used = result.n_iter
    for attempt in itertools.count(1):
        if ask.proposal is None:
            if current.deferred:  # it stopped for a restart that the rounds left no room for: it settles instead
                done[-1] = yield from current.rounds(current.t + max_iter - used, tol, progress)
                result = _joined(done, result.restarts, result.restarted)
            break
        restart, fresh = ask.proposal
        restart = restart._replace(weights=current.also)
        progress.begin(f"{label}, restart pass {attempt} ({fresh.sum()} clients)")
        trial_pass = _Pass(strategy, family, clients, restart, participation)
        trial_ask = _RestartAsk(strategy, trial_pass, attempt + 1, used, max_iter, tol)
        trial = yield from trial_pass.rounds(max_iter - used - 1, tol, progress, attempt + 1, also=trial_ask)
        used += trial.n_iter
        keep = ~fresh | strategy.keep_restart(result, trial)
        if not keep[fresh].any():
            if current.deferred:  # the clients it left moving for this restart, which kept none, settle now
                progress.begin(f"{label}, resumed after restart pass {attempt}")
                done[-1] = yield from current.rounds(current.t + max_iter - used, tol, progress)
                result = _joined(done, result.restarts, result.restarted)
            break
        done, current, ask = [_rounds_only(result), trial], trial_pass, trial_ask
        if not keep.all():
            progress.begin(f"{label}, restart pass {attempt} settled")
            current = _Pass(strategy, family, clients, trial.params.where(keep, result.params), participation)
            done = [_rounds_only(p) for p in done]   # only the two passes' rounds count from here (_joined)
            del result, trial, trial_pass, trial_ask, restart   # and the rest goes: 200 MB at 10^5 clients
            ask = _RestartAsk(strategy, current, attempt + 1, used, max_iter, tol)
            done.append((yield from current.rounds(max_iter - used, tol, progress, attempt + 1, also=ask)))
            used += done[-1].n_iter
        result = _joined(done, attempt, np.flatnonzero(fresh & keep))
    return result


class _RestartAsk:
    """``also`` for the rounds of the pass ``current`` (:meth:`_Pass.rounds`): the restart its end proposes
    (:meth:`~fedmm.algorithms.Strategy.restart`, where the ``max_iter`` rounds leave it two after the ``used`` before
    the pass), whose clients refit their proportions to it (:func:`fit_weights`) in the message that asks the pass's
    last log-likelihoods, not in one of its own (issue 60). The proposal, ``(start, fresh)`` or None, is kept in
    :attr:`proposal`; a trial pass's is used only where every client keeps the trial. A class: a closure keeping its
    proposal on itself is a reference cycle, which held each finished pass until the garbage collector ran."""

    def __init__(self, strategy, current, attempt, used, max_iter, tol):
        self.strategy, self.current, self.attempt, self.used, self.max_iter, self.tol = \
            strategy, current, attempt, used, max_iter, tol
        self.proposal = None

    def __call__(self, params):
        room = self.max_iter - self.used - self.current.t >= 2 and params.is_finite().all()   # a diverged run: reported
        self.proposal = self.strategy.restart(params, self.strategy.diagnostics(self.current.server), self.attempt) \
            if room else None
        return None if self.proposal is None else ("fit_weights", *self.proposal, self.max_iter, self.tol)


def single_pass(strategy, family, clients, start, max_iter, tol, also, first=None):
    """:func:`passes` of a strategy that never restarts, ``also(params)`` asked about its final parameters in one
    message with their log-likelihoods (:meth:`_Pass.rounds`, as ``first``): ``(FitResult, its answer)``."""
    current = _Pass(strategy, family, clients, start, None)
    result = yield from current.rounds(max_iter, tol, SILENT, also=also, first=first)
    return result, current.also


def _rounds_only(result):
    """A pass's :class:`FitResult` as an earlier pass of a run needs it (:func:`_joined`): its rounds only."""
    return result._replace(params=None, loglik=None, diagnostics=None)


def _joined(passes, restarts, restarted):
    """Consecutive passes as one run: the last one's outcome, the rounds and history of all."""
    final = passes[-1]
    return final._replace(n_iter=sum(p.n_iter for p in passes),
                          history={k: np.concatenate([p.history[k] for p in passes]) for k in final.history},
                          restarts=restarts, restarted=restarted)


def fit_restarts(strategy, family, data, starts, max_iter, tol, mode="batched", progress=SILENT,
                 participation=None):
    """Run from every start, side by side (:func:`drive`), and keep the best log-likelihood.

    Per-client strategies fit independent problems, so each client keeps its
    own best start; the others keep the best run by
    :meth:`~fedmm.algorithms.Strategy.better_run` (the total log-likelihood
    unless the strategy says otherwise), the starts taken in order.
    ``n_iter`` and ``converged`` describe the runs that were kept; the rest
    is the run with the best total.
    """
    data = as_clients(family, data, mode)
    data.ledger.phase = "rounds"
    return drive(data, [best_of_starts(strategy, family, data, starts, max_iter, tol, progress, participation)])[0]


def best_of_starts(strategy, family, clients, starts, max_iter, tol, progress=SILENT, participation=None):
    """:func:`fit_restarts` as a generator of its queries (:func:`drive`)."""
    runs = yield "spawn", [passes(strategy, family, clients, start, max_iter, tol,
                                  progress.run(f"start {i + 1} of {len(starts)}"), participation)
                           for i, start in enumerate(starts)]
    loglik = np.stack([r.loglik for r in runs])                     # (n_starts, K)
    best_total = 0
    for i, candidate in enumerate(runs[1:], start=1):
        if strategy.better_run(runs[best_total], candidate, clients.n_samples):
            best_total = i
    K = clients.n_clients
    choice = first_best(loglik, axis=0) if strategy.per_client else np.full(K, best_total)
    index = np.arange(K)
    params = MixtureParams(*(np.stack(field)[choice, index] for field in zip(*(r.params for r in runs))))
    kept = [runs[i] for i in np.unique(choice)]
    return runs[best_total]._replace(params=params, n_iter=max(r.n_iter for r in kept),
                                     converged=all(r.converged for r in kept), loglik=loglik[choice, index],
                                     start=best_total)


def _check_progress(strategy, before, after):
    """Warn when a run ends with a lower log-likelihood than it started with (beyond round-off)."""
    if after < before - 1e-6 * (1.0 + abs(before)):
        warnings.warn(f"{type(strategy).__name__} ended with a lower objective, the log-likelihood ({after:.6g}), than "
                      f"its start ({before:.6g}): its steps did not climb. For gradient methods lower C_eta (a step "
                      "contracts for C_eta < 2); otherwise check the data for clients far from the others.",
                      ConvergenceWarning, stacklevel=4)


def divergence_bound(data_scale):
    """The largest parameter a client may hold, ``1e8 (1 + data_scale)``: beyond it a run has diverged, and
    a remote client's reply is refused (:mod:`fedmm.flower.server`)."""
    return 1e8 * (1.0 + data_scale)


def _check_finite(strategy, params, loglik, t, bound):
    # Every round, so first one cheap pass per array: a sum is finite only if every term is (an overflow of
    # finite terms only sends it to the client-by-client check); the largest |theta| without np.abs's copy.
    if all(np.isfinite(a.sum()) for a in (*params, loglik)) and max(params.theta.max(), -params.theta.min()) <= bound:
        return
    bad = ~(params.is_finite() & np.isfinite(loglik))
    huge = np.abs(params.theta).reshape(len(loglik), -1).max(axis=1) > bound
    if (bad | huge).any():
        what = "non-finite parameters or log-likelihood" if bad.any() else "parameters beyond 1e8 times the data"
        raise DivergenceError(f"The run diverged in round {t}: client(s) {np.flatnonzero(bad | huge)[:10].tolist()} "
                              f"have {what}. {_advice(strategy)}")


def _advice(strategy):
    """What to change, for the kind of strategy that diverged."""
    data = ("Look for clients with repeated or nearly identical points, or nearly collinear features (a "
            "component collapses onto them: keep reg_covar > 0, or use fewer components), and for clients "
            "whose data are far from the others'.")
    if isinstance(strategy, GradientStrategy):
        return ("Gradient steps: lower C_eta (steps contract for C_eta < 2; the paper's range is 0.55 to 1.35), "
                "and for regressions keep precondition=True. " + data)
    return data
