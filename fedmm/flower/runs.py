"""The server's queries of a fit's runs over Flower: starts, rounds, log-likelihoods, local rounds, proportions.

:class:`RunQueries` is the part of :class:`fedmm.flower.server.FlowerClients` that asks for what the runs of
:func:`fedmm.engine.drive` ask. Each query is built as a :class:`Part`: its rows per client, the check of a
reply, what to make of the replies that pass. One part goes as the query of its name (``query.step``); several,
of any kinds, go in one message (:meth:`RunQueries.together`, ``query.together``): each part's arrays under
``p<i>/``, and its settings in the config's ``parts``, ``[[i, action, settings], ...]``, those the client is
asked. Each part of a reply is checked as a reply to that query alone would be.
"""

import json
import logging
from typing import Callable, NamedTuple

import numpy as np

from ..alignment import match_each
from ..protocol import ClientMessage, stack, take
from ._checks import _arrays_ok, _rounds_ok, _simplex_ok
from .codec import flatten, local_fit, prefixed, split_runs, unflatten

__all__ = ["RunQueries", "Part", "RELABELLED"]

log = logging.getLogger("fedmm.flower")

#: What goes in a message with others (:meth:`RunQueries.together`): the calls of runs side by side (a part for all
#: the runs), and calls a part each.
RUNS, CALLS = ("start", "step", "loglik", "local"), ("fit_weights", "family_starts")

#: How many times better (in the total distance to what was sent) another labelling must match a round's reply
#: for the server to find it relabelled (:meth:`RunQueries._restore_labels`). Measured on the attack suite:
#: a party that reverses its components, 6.9 times at least; honest replies tie (1.0) where two components
#: coincide; a party that shifts its estimates, up to 1.2 times (caught by its distance to the centre).
RELABELLED = 2.0


class Part(NamedTuple):
    """One query, alone or in a message with others: ``rows`` ({client: arrays}) go to those clients with
    ``settings`` (and ``config``, {client: settings of its own}); ``check(k, arrays)`` says why a reply fails
    (None when it passes); ``finish({client: arrays})`` makes the answer from the replies that passed."""

    action: str
    rows: dict
    check: Callable
    finish: Callable
    required: bool = True
    settings: dict = {}
    config: dict = {}
    method: str = ""


class RunQueries:
    """The queries of runs side by side (:func:`fedmm.engine.drive`), a transport's calls of
    :class:`fedmm.protocol.Transport`; mixed into :class:`fedmm.flower.server.FlowerClients`."""

    def start(self, strategy, params):
        self.start_runs([(0, strategy, params)])

    def step(self, strategy, broadcast, heard=None):
        return self.step_runs([(0, strategy, broadcast, heard, None)])[0]

    def loglik(self, params):
        return self.loglik_runs([(0, params)])[0]

    def local(self, strategy, broadcast, max_iter, tol):
        return self.local_runs([(strategy, broadcast, max_iter, tol)])[0]

    def start_runs(self, runs):
        """Runs side by side start in one query (:func:`fedmm.engine.drive`): each client keeps run ``slot``'s
        state, and its method, under that slot."""
        return self._send_parts([self._start_part(runs)])[0]

    def step_runs(self, runs):
        """Rounds of runs side by side in one query: each client asked by any run gets its rows of every run that
        asks it (with the run's start, :meth:`start_runs`, when it is the run's first round), and replies with a
        message per run; a reply any part of which fails its check is rejected."""
        return self._send_parts([self._step_part(runs)])[0]

    def loglik_runs(self, runs):
        """Every client's log-likelihood at its rows of several runs' parameters, in one query."""
        return self._send_parts([self._loglik_part(runs)])[0]

    def local_runs(self, runs):
        """Every client runs its own rounds of several runs of methods that run on their own, in one query
        (:meth:`fedmm.clients.LocalClients.local_runs`); each reply's parameters are checked as a round's, its
        rounds' count (at most the run's ``max_iter``) and log-likelihoods as a number of rounds and finite."""
        return self._send_parts([self._local_part(runs)])[0]

    def fit_weights(self, params, which=None, max_iter=100, tol=1e-3):
        return self._send_parts([self._fit_weights_part(params, which, max_iter, tol)])[0]

    def together(self, batch):
        """Queries of several kinds in one message (:meth:`fedmm.clients.LocalClients.together`): ``batch``,
        ``{kind: [arguments]}``; ``{kind: [answers]}``. A batch of one query goes as that query."""
        parts, where = [], {}
        for kind, asks in batch.items():
            if kind in CALLS:    # a part per call
                where[kind] = list(range(len(parts), len(parts) + len(asks)))
                parts += [getattr(self, f"_{kind}_part")(*ask) for ask in asks]
            elif kind in RUNS:   # one part for the runs
                where[kind] = len(parts)
                parts.append(getattr(self, f"_{kind}_part")(asks))
            else:
                raise ValueError(f"{kind!r} does not go in a message with others; those that do: {RUNS + CALLS}.")
        answers = self._send_parts(parts)
        return {kind: [answers[i] for i in at] if isinstance(at, list) else answers[at] for kind, at in where.items()}

    # --- the parts ----------------------------------------------------------------------

    def _start_part(self, runs):
        rows = {k: prefixed([(slot, flatten(take(params, k))) for slot, _, params in runs])
                for k in range(self.n_clients)}
        return Part("start", rows, lambda k, v: _arrays_ok(v, {}), lambda replies: [None] * len(runs),
                    settings={"runs": json.dumps(self._started([(slot, strategy) for slot, strategy, _ in runs]))},
                    method=runs[0][1].name)

    def _started(self, runs):
        """Note that the ``(slot, strategy)`` of ``runs`` start (their method, whether their messages carry
        statistics, their first round, which every client must answer, still to come); what the clients are told
        of their methods, by slot."""
        self._runs.update({slot: (strategy.name, strategy.sends_stats, True) for slot, strategy in runs})
        return {str(slot): [strategy.name, strategy.client_options()] for slot, strategy in runs}

    def _step_part(self, runs):
        starts = self._started([(slot, start[0]) for slot, _, _, _, start in runs if start is not None])
        asked = [np.arange(self.n_clients) if heard is None else np.asarray(heard) for _, _, _, heard, _ in runs]
        parts = {int(k): [] for k in np.unique(np.concatenate(asked))}
        for (slot, _, broadcast, _, start), who in zip(runs, asked):
            for k in who:
                first = {} if start is None else flatten(take(start[1], k), "start.")
                parts[k].append((slot, {**flatten(take(broadcast.params, k)), **first}))
        templates = {slot: self._message_template(broadcast.params.weights.shape[1], self._runs[slot][1])
                     for slot, _, broadcast, _, _ in runs}

        def check(k, v):
            split = split_runs(v)
            if None in split or sorted(split) != sorted(slot for slot, _ in parts[k]):
                return f"replied for runs {sorted(split)}, asked for {sorted(slot for slot, _ in parts[k])}"
            return next(filter(None, (self._message_check(k, split[slot], templates[slot]) for slot in split)), None)

        first = any(self._runs[slot][2] for slot, *_ in runs)
        return Part("step", {k: prefixed(part) for k, part in parts.items()}, check,
                    lambda replies: self._messages(runs, asked, replies), required=first,
                    settings={"starts": json.dumps(starts)}, method=self._runs[runs[0][0]][0],
                    config={k: {"runs": json.dumps([slot for slot, _ in part])} for k, part in parts.items()})

    def _messages(self, runs, asked, replies):
        """Each run's ``(messages, replied)`` from the replies to a round of runs side by side."""
        answers = []
        for (slot, _, broadcast, _, _), who in zip(runs, asked):
            mine = {k: split_runs(replies[k])[slot] for k in who if k in replies}
            mine = self._restore_labels(mine, broadcast.params.theta)
            self._runs[slot] = self._runs[slot][:2] + (False,)
            replied = np.array(sorted(mine), dtype=int)
            if replied.size < min(self.min_clients, self.n_clients):
                raise RuntimeError(f"A round heard {replied.size} client(s), fewer than min_clients="
                                   f"{self.min_clients}; see the log (fedmm.flower) for the rejected and missing "
                                   "replies.")
            messages = stack([unflatten(ClientMessage, mine[k], nested={"stats": self._stats_type}) for k in replied])
            answers.append((messages._replace(n=self.n_samples[replied]), replied))
        return answers

    def _loglik_part(self, runs):
        slots = [slot for slot, _ in runs]
        rows = {k: prefixed([(slot, flatten(take(params, k))) for slot, params in runs]) for k in range(self.n_clients)}
        return Part("loglik", rows, lambda k, v: _arrays_ok(v, {f"run{slot}.loglik": (1,) for slot in slots}),
                    lambda replies: [np.concatenate([replies[k][f"run{slot}.loglik"] for k in range(self.n_clients)])
                                     for slot in slots], settings={"runs": json.dumps(slots)})

    def _local_part(self, runs):
        if any(broadcast.prior is not None for _, broadcast, _, _ in runs):
            raise ValueError("A method whose start sends a prior (TGMM) does not run on Flower.")
        K = self.n_clients
        rows = {k: prefixed([(i, flatten(take(broadcast.params, k))) for i, (_, broadcast, _, _) in enumerate(runs)])
                for k in range(K)}
        template = self._params_template(runs[0][1].params.weights.shape[1])
        check_params, shapes = self._params_check(template), {k: v.shape for k, v in flatten(template).items()}

        def check(k, v):
            split = split_runs(v)
            if set(split) != set(range(len(runs))):
                return f"replied for runs {sorted(map(str, split))}, asked for runs 0 to {len(runs) - 1}"
            problems = ((i, _rounds_ok(part, shapes, runs[i][2]) or check_params(k, {x: part[x] for x in shapes}))
                        for i, part in split.items())
            return next((f"run {i}: {problem}" for i, problem in problems if problem), None)

        settings = {str(i): [strategy.name, strategy.client_options(), max_iter, tol]
                    for i, (strategy, _, max_iter, tol) in enumerate(runs)}
        def finish(replies):
            return [local_fit([split_runs(replies[k])[i] for k in range(K)]) for i in range(len(runs))]
        return Part("local", rows, check, finish, settings={"runs": json.dumps(settings)}, method=runs[0][0].name)

    def _fit_weights_part(self, params, which=None, max_iter=100, tol=1e-3):
        which = np.ones(self.n_clients, dtype=bool) if which is None else which
        R = params.weights.shape[1]
        rows = {k: {**flatten(take(params, k)), "which": np.array([float(which[k])])} for k in range(self.n_clients)}
        return Part("fit_weights", rows, lambda k, v: _arrays_ok(v, {"weights": (1, R)}) or _simplex_ok(v["weights"]),
                    lambda replies: np.concatenate([replies[k]["weights"] for k in range(self.n_clients)]),
                    settings={"max_iter": int(max_iter), "tol": float(tol)})

    # --- sending ----------------------------------------------------------------------

    def _send_parts(self, parts):
        """The answers of ``parts``, sent in one message: the query of its name for one part, else ``together``."""
        if len(parts) == 1:
            part = parts[0]
            index = np.array(sorted(part.rows), dtype=int)
            replies = self._ask(part.action, [part.rows[k] for k in index], part.check, index, required=part.required,
                                config_rows=[part.config.get(k, {}) for k in index], method=part.method,
                                **part.settings)
            return [part.finish(replies)]
        index = np.array(sorted(set().union(*(part.rows for part in parts))), dtype=int)
        mine = [[i for i, part in enumerate(parts) if k in part.rows] for k in index]
        rows = [{f"p{i}/{key}": value for i in asked for key, value in parts[i].rows[k].items()}
                for k, asked in zip(index, mine)]
        config = [{"parts": json.dumps([[i, parts[i].action, {**parts[i].settings, **parts[i].config.get(k, {})}]
                                         for i in asked])} for k, asked in zip(index, mine)]
        raw = self._send("together", rows, index, config, record="+".join(dict.fromkeys(p.action for p in parts)),
                         method=next((p.method for p in parts if p.method), ""))
        asked_by = dict(zip(index.tolist(), mine))
        split = {k: _parted(values, set(asked_by[k])) for k, values in raw.items()}   # in the order they arrived
        answers, failed, fatal = [], [], []
        for i, part in enumerate(parts):
            good, bad = self._judge({k: v if isinstance(v, str) else v[i] for k, v in split.items() if k in part.rows},
                                    part.action, part.check)
            answers.append(good)
            failed += bad
            fatal += bad if part.required else []
        self._settle(raw, failed, fatal)
        return [part.finish(good) for part, good in zip(parts, answers)]

    def _restore_labels(self, replies, sent):
        """A round's replies in the labels the server sent (``sent``: every client's ``theta``).

        An honest client's step keeps each component's label: its E-step, gradient or M-step starts from the
        component it was sent, so no other labelling matches its reply to what it was sent better (measured in
        one process: none of 19,334 honest replies on three designs). A reply that another labelling matches
        more than :data:`RELABELLED` times better (:func:`fedmm.alignment.match_each`) was relabelled by its
        party (``label-flip``, ``docs/threat-model.md``): relabelling every round, it kept the centre
        oscillating and the fit from converging. Its components are put back, and the party is named in
        ``relabelled``."""
        if not replies:
            return replies
        index = sorted(replies)
        reference, theta = sent[index], np.concatenate([replies[k]["theta"] for k in index])
        perms = match_each(reference, theta)
        sent_labels = np.linalg.norm(reference - theta, axis=-1).sum(axis=1)
        best = np.linalg.norm(reference - np.take_along_axis(theta, perms[..., None], axis=1), axis=-1).sum(axis=1)
        R = perms.shape[1]
        for k, perm in zip(np.array(index)[sent_labels > RELABELLED * best], perms[sent_labels > RELABELLED * best]):
            log.warning("fedmm.flower: node %s's reply came relabelled %s: its components were put back in "
                        "the labels sent", self.nodes[k], perm.tolist())
            self.relabelled.add(k)
            replies[k] = {key: (x[:, perm] if x.ndim >= 2 and x.shape[1] == R else x)
                          for key, x in replies[k].items()}
        return replies


def _parted(values, asked):
    """A reply to ``together`` by part (``{i: arrays}`` for the parts ``asked``), or why it is not one (a str)."""
    if isinstance(values, str):
        return values
    parts = {i: {} for i in asked}
    for key, value in values.items():
        head, _, rest = key.partition("/")
        i = int(head[1:]) if head[:1] == "p" and head[1:].isdigit() else None
        if i not in parts or not rest:
            return f"an array {key!r} outside the parts asked ({sorted(asked)})"
        parts[i][rest] = value
    return parts
