"""Malicious clients for testing a federation's server: honest ``ClientApp``\\ s whose replies are tampered with.

Every attack keeps its replies well formed (float64 arrays of the right shapes, finite, sizes that are
positive integers, proportions on the simplex, statistics whose sizes sum to ``n``), so they pass the
server's format checks (:mod:`fedmm.flower.server`) and test what the server does with the numbers. They
are the suite of ``docs/threat-model.md`` and ``validation/attacks.py``:

=================  =====================================================================================
attack             what the malicious node does
=================  =====================================================================================
``claims-n``       honest data, but claims ``n = 1e6`` samples, every sum scaled to match
``claims-n300``    the same, claiming ``n = 1e300``: more than a float64 counts exactly, or an int64 holds
``shift-n``        shifts its parameters by +3 (its sums to match) and claims ``n = 1e6``
``shift-n18``      the same, claiming ``n = 1e18``
``hello-sum_x``    sends ``sum x = 1e200`` for the units step
``hello-sum_xx``   sends ``sum x x^T = 1e300 I`` (per feature: every square 1e300) for the units step
``stats-Sx``       every round, responsibility-weighted sums of ``x`` (``b`` for regressions) at 1e200
``stats-Sxx``      every round, second-moment sums (``Sxx``; ``A`` for regressions) at 1e200
``inflate-Sxx``    every round, second-moment sums of ``x`` (``y`` for regressions) times 100: variances
                   a hundred times its data's, within every plausible range
``theta-1e12``     every round, parameters at 1e12 (finite)
``units-scale``    reports the largest value of its data as 1.7e308, then parameters at 1e12
``label-flip``     every round, its components in reverse order (parameters, proportions, sums)
``copy``           answers every query with another node's reply (a Sybil of node ``source``)
``mimic``          answers every query with another node's reply times ``1 + 1e-12`` (sizes kept): a copy
                   that a comparison bit for bit misses
=================  =====================================================================================

"Every round" includes each client's own rounds of local EM's start, which it reports in one query
(``local``): the attacks on parameters tamper with that reply too. ``copy`` and ``mimic`` are made by
:func:`copying`, the others by :func:`malicious`.
"""

import json

import flwr.compat.common.recorddict_compat as compat
import numpy as np
from flwr.app import Message
from flwr.clientapp import ClientApp
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays

from .client import _ANSWERS
from .codec import arrays, config, encode, per_run

__all__ = ["ATTACKS", "MIMIC", "SECURE_ATTACKS", "tampered", "malicious", "copying", "secure_tampering"]

ACTIONS = ("hello",) + tuple(_ANSWERS)


def tampered(honest, tampers):
    """A ``ClientApp`` that answers as ``honest`` does, except that its replies to each action in ``tampers``
    are passed through ``tampers[action](values) -> values`` (``values``: the reply's arrays, each run's apart when
    runs go side by side, :func:`fedmm.flower.codec.per_run`), also where they are parts of a message of several
    queries (``together``)."""
    app = ClientApp()

    def make(action):
        def handle(message, context):
            reply = honest(message, context)
            if reply.has_error() or action not in (*tampers, "together"):
                return reply
            values = arrays(reply.content)
            if action == "together":
                values = _tampered_parts(tampers, values, json.loads(config(message.content)["parts"]))
            else:
                values = per_run(tampers[action], values)
            return Message(encode(values, **config(reply.content)), reply_to=message)
        return handle
    for action in ACTIONS:
        app.query(action)(make(action))
    return app


def _tampered_parts(tampers, values, parts):
    """A reply to ``together`` whose parts (under ``p<i>/``) are tampered with as replies to their own queries."""
    out = dict(values)
    for i, action, _ in parts:
        if action in tampers:
            prefix = f"p{i}/"
            part = {key[len(prefix):]: out.pop(key) for key in list(out) if key.startswith(prefix)}
            out.update({prefix + key: value for key, value in per_run(tampers[action], part).items()})
    return out


def _claims(n_claimed, shift=0.0):
    """Claims ``n_claimed`` samples (sums scaled by ``n_claimed / n``), parameters and first sums shifted."""
    def hello(v):
        factor = n_claimed / v["n"][0]
        return {k: (np.array([float(n_claimed)]) if k == "n" else x * factor) for k, x in v.items()}

    def step(v):
        factor = n_claimed / v["n"][0]
        out = {**v, "n": np.array([float(n_claimed)]), "theta": v["theta"] + shift, "loglik": v["loglik"] * factor}
        for key in (k for k in v if k.startswith("stats.")):
            out[key] = v[key] * factor
        for first in ("stats.Sx", "stats.b"):
            if first in v and shift:
                out[first] = out[first] + shift * out["stats.N"][..., None] * (first == "stats.Sx")
        return out
    # Local EM's start runs on the client in one query (``local``): a shifted party shifts that reply too.
    return {"hello": hello, "step": step, **({"local": lambda v: {**v, "theta": v["theta"] + shift}} if shift else {})}


def _stats(fields, value):
    """Every round, the named sums (the first one the reply has) set to ``value``."""
    def step(v):
        key = next((f for f in fields if f in v), None)
        return v if key is None else {**v, key: np.full_like(v[key], value)}
    return {"step": step}


def _theta(value):
    return lambda v: {**v, "theta": np.full_like(v["theta"], value)}


def _flip(v):
    """Components in reverse order: every array with a component axis (axis 1 of the (1, R, ...) ones)."""
    R = v["weights"].shape[1]
    return {k: (x[:, ::-1].copy() if x.ndim >= 2 and x.shape[1] == R else x) for k, x in v.items()}


#: Attack name -> the tampering of one node's replies, ``{action: values -> values}``.
ATTACKS = {
    "claims-n": _claims(1e6),
    "claims-n300": _claims(1e300),
    "shift-n": _claims(1e6, shift=3.0),
    "shift-n18": _claims(1e18, shift=3.0),
    "hello-sum_x": {"hello": lambda v: {**v, "sum_x": np.full_like(v["sum_x"], 1e200)}},
    "hello-sum_xx": {"hello": lambda v: {**v, "sum_xx": 1e300 * (np.eye(len(v["sum_xx"])) if np.ndim(v["sum_xx"]) == 2
                                                                 else np.ones(len(v["sum_xx"])))}},
    "stats-Sx": _stats(("stats.Sx", "stats.b"), 1e200),
    "stats-Sxx": _stats(("stats.Sxx", "stats.A"), 1e200),
    "inflate-Sxx": {"step": lambda v: {**v, **{k: v[k] * 100.0 for k in ("stats.Sxx", "stats.Syy") if k in v}}},
    "theta-1e12": {"step": _theta(1e12), "local": _theta(1e12)},
    "units-scale": {"units": lambda v: {**v, "scale": np.array([1.7e308])}, "step": _theta(1e12),
                    "local": _theta(1e12)},
    "label-flip": {"step": _flip, "local": _flip},
}


#: The factor of a ``mimic``'s copies (:func:`copying`).
MIMIC = 1 + 1e-12


def copying(grid, source, target, factor=1.0):
    """Make node ``target`` of a :class:`~fedmm.flower.testing.LocalGrid` answer every query with node
    ``source``'s reply to it, every array but the size ``n`` times ``factor`` (:data:`MIMIC`: a ``mimic``).
    ``source``'s reply must be delivered first (in a ``LocalGrid``, nodes answer in the order the server
    asks them): a test device."""
    replies = {}
    apps = grid.apps

    def record(app):
        def handle(message, context):
            reply = app(message, context)
            replies[config(message.content).get("tag")] = reply
            return reply
        return handle

    def copy(message, context):
        original = replies[config(message.content).get("tag")]
        if factor == 1.0 or original.has_error():
            return Message(original.content, reply_to=message)
        values = {key: x if key == "n" else x * factor for key, x in arrays(original.content).items()}
        return Message(encode(values, **config(original.content)), reply_to=message)
    apps[source] = record(apps[source])
    apps[target] = copy
    return grid


def malicious(honest, attack):
    """``honest``'s ``ClientApp`` turned into a node that runs ``attack`` (a name in :data:`ATTACKS`)."""
    return tampered(honest, ATTACKS[attack])


def _at_the_range(fitres):
    """Every coordinate of its vector, the probe too, far beyond the range: SecAgg+'s mod clips each to its top."""
    vector = parameters_to_ndarrays(fitres.parameters)[0]
    fitres.parameters = ndarrays_to_parameters([np.full_like(vector, 1e9)])
    return fitres


def _weight_times(factor):
    def change(fitres):
        fitres.num_examples = int(fitres.num_examples * factor)
        return fitres
    return change


#: Attack name -> the change a malicious party makes to its reply to a private round under secure aggregation
#: (``FitRes -> FitRes``), before SecAgg+'s mod quantizes and masks it (:func:`secure_tampering`):
#:
#: ``secure-range``: every coordinate at the top of the range SecAgg+ clips to (a vector of norm ``range sqrt(m)``);
#: ``secure-weight``: reports fifty times its weight, which SecAgg+ multiplies its vector by and divides the sum by.
SECURE_ATTACKS = {"secure-range": _at_the_range, "secure-weight": _weight_times(50)}


def secure_tampering(attack):
    """A Flower mod (``client_app(mods=[...])``) that runs ``attack`` (a name in :data:`SECURE_ATTACKS`) on its
    node's replies to private rounds, inside SecAgg+'s mod: what a party that runs its own code can send."""
    change = SECURE_ATTACKS[attack]

    def mod(message, context, call_next):
        reply = call_next(message, context)
        if message.metadata.message_type != "train" or reply.has_error():
            return reply
        fitres = change(compat.recorddict_to_fitres(reply.content, keep_input=True))
        return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=message)
    return mod
