"""The client side: a Flower ``ClientApp`` that answers fedmm's queries from its own data.

The client holds its rows; the server sends parameters and receives :mod:`fedmm.protocol`'s messages
(parameters, sizes, log-likelihoods, responsibility-weighted sums), never rows. What a client keeps
between queries (its model's settings, the fit's units, its :class:`~fedmm.protocol.ClientState`)
lives in Flower's per-node ``context.state``.

Queries (message type ``query.<action>``):

==============  =====================================================  ==============================
action          the server sends                                       the client replies
==============  =====================================================  ==============================
``hello``       the model's name and settings                          ``n``, sums of ``x``, ``x x^T``
                                                                       (and ``y``, ``y^2``)
``units``       the fit's standard units (:class:`fedmm.units.Units`)  the largest absolute value
``family_start``  a seed, ``n_components``                             its own start's parameters
``user_start``  given weights and parameters                           them, with its variances
``start``       a start's parameters, the method and its client        nothing
                options
``step``        its row of the :class:`~fedmm.protocol.Broadcast`      its :class:`~fedmm.protocol.ClientMessage`
``private_step``  a private fit's release and settings (local noise)   its noisy ``update``
``loglik``      parameters                                             its log-likelihood
``fit_weights``  parameters, whether to refit, ``max_iter``, ``tol``   its mixing proportions
``folds``       a seed, ``n_folds``                                    nothing (it deals its rows into
                                                                       folds: :func:`fedmm.robust.client_fold`)
``held_out``    parameters, a ``fold``                                 the log-likelihood of its rows
                                                                       in that fold
``together``    queries of :data:`~fedmm.flower.codec.TOGETHER`, each  the replies, each under its
                one's arrays under ``p<i>/``, and ``parts``            part's prefix
                (``[[i, action, settings], ...]``)
==============  =====================================================  ==============================

A private fit (:mod:`fedmm.privacy`) asks for its rounds otherwise (:mod:`fedmm.flower.secure`). Under central
noise with Flower's message type ``train``, through Flower's SecAgg+: the release's components arrive as a
``FitIns``; the client replies with its clipped update (each row private: its E-step's sums over its size) and
its weight, which SecAgg+'s mod masks before they leave. Under local noise with the query ``private_step``:
the release's components arrive, and the client replies with its ``update`` (or sums) with its own noise on it.
In such a fit ``hello`` gets the client's size and number of features only, and ``units`` nothing; a private
``hello`` with ``bounds`` (the fit's public bounds, ``[lower, upper]`` in JSON) has the client clip its rows into
them and warn, locally, how many were outside (:class:`fedmm.privacy.OutsideBoundsWarning`).

A query with ``train_fold`` in its settings is answered from the client's rows outside that fold
(cross-validation of ``penalty="auto"``, :func:`fedmm.algorithms.tuning.select_penalty`): the server fits on
those as on a federation of its own.

Every reply echoes the query's ``tag``, so the server can tell a reply to this query from a stale one.
The reply to ``hello`` also gives the client's name, ``client-id`` (else ``partition-id``) from its node
config, when it has one: the server orders the clients by it and reports it in ``client_ids_``.
"""

import json
import warnings
from pathlib import Path

import numpy as np
import flwr.compat.common.recorddict_compat as compat
from flwr.app import ConfigRecord, Message
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

from ..algorithms.pooled import TrimmedPooledEM
from ..clients import client_family_starts, data_scale, fit_weights, local_rounds, user_start
from ..data import FederatedData
from ..estimators import get_model
from ..families import MixtureParams
from ..methods import METHODS
from ..privacy import (OutsideBoundsWarning, clip_rows, clip_to_bounds, noised, outside_bounds_message,
                       released_proportions, sent_params, shared_point, sums_bounds, sums_noise, sums_vector)
from ..privacy import encode as encode_update
from ..protocol import Broadcast, ClientState
from ..robust import client_fold
from ..units import Units, client_sums
from .codec import (TOGETHER, arrays, config, encode, flatten, local_fit_arrays, prefixed, record_arrays,
                    split_runs, unflatten)

__all__ = ["client_app", "load_from_config"]


def load_from_config(context):
    """``(X, y)`` from the file the node's config names: ``data-path`` in the node config, or
    ``data-dir`` in the run config with ``client-<partition-id>`` in it. ``.npz`` holds ``X`` (and
    ``y``); ``.npy`` is ``X``; ``.csv`` is numbers with a header line, ``y`` the column the run config
    names in ``y-column`` (none for Gaussian mixtures)."""
    path = context.node_config.get("data-path")
    if path is None:
        if "data-dir" not in context.run_config or "partition-id" not in context.node_config:
            raise ValueError("This node has no data: set data-path in its node config, or data-dir in the run "
                             "config and partition-id in the node config.")
        folder = Path(str(context.run_config["data-dir"]))
        matches = sorted(folder.glob(f"client-{context.node_config['partition-id']}.*"))
        if not matches:
            raise FileNotFoundError(f"No client-{context.node_config['partition-id']}.npz/.npy/.csv in {folder}.")
        path = matches[0]
    path = Path(str(path))
    if path.suffix == ".npz":
        with np.load(path) as f:
            return f["X"], (f["y"] if "y" in f else None)
    if path.suffix == ".npy":
        return np.load(path), None
    table = np.genfromtxt(path, delimiter=",", names=True)
    names = list(table.dtype.names)
    y_column = context.run_config.get("y-column")
    X = np.column_stack([table[n] for n in names if n != y_column])
    return X, (None if y_column is None else table[y_column])


def client_app(load=None, methods=(), mods=()):
    """The ``ClientApp`` of a fedmm client.

    Parameters
    ----------
    load : callable, optional
        ``load(context) -> (X, y)``: this client's rows (``y`` None for Gaussian mixtures). By default
        :func:`load_from_config`.
    methods : sequence of method classes, optional
        Methods written outside fedmm that this client runs, besides :data:`fedmm.methods.METHODS`: the
        server names the method of a fit, and a client runs only code it was given
        (``docs/extending.md``).
    mods : sequence of Flower mods, optional
        Applied to every message inside fedmm's SecAgg+ mod, so that they see a private round's reply before it
        is masked (Flower's ``message_size_mod``, say, or an attack's, :data:`fedmm.flower.attacks.SECURE_ATTACKS`).

    Returns
    -------
    flwr.clientapp.ClientApp
    """
    load = load or load_from_config
    # The strategies a fit asks clients to run: the methods, and the rounds of the trimmed pooled start.
    known = {**METHODS, TrimmedPooledEM.name: TrimmedPooledEM, **{cls.name: cls for cls in methods}}
    # Flower's SecAgg+ mod answers the secure aggregation's stages of a private fit's rounds (message type
    # ``train``) and lets every other message through.
    app = ClientApp(mods=[secaggplus_mod, *mods])
    rows = {}

    def read(context, est):
        """The client's rows, read and checked once per run, not at every query (a round's hot path)."""
        key = (context.run_id, context.node_id)
        if key not in rows:
            if rows and next(iter(rows))[0] != context.run_id:
                rows.clear()                                   # a new run: forget the last one's rows
            rows[key] = _read(load, context, est)
        return rows[key]

    def handler(action, answer):
        def handle(message, context):
            request = config(message.content)
            reply = answer(message, context, request)
            # Every number travels as float64 (sizes too: the server checks they are integers).
            reply = {k: np.asarray(v, dtype=np.float64) for k, v in reply.items()}
            return Message(encode(reply, tag=request.get("tag", ""), **_name(context, action)), reply_to=message)
        app.query(action)(handle)

    handler("hello", _hello(read))
    for action, answer in _ANSWERS.items():
        handler(action, _with_session(read, answer, known))
    app.train()(_private_round(read, known))
    return app


def _name(context, action):
    """The client's name for the server (hello only): ``client-id``, else ``partition-id``, from its node config."""
    if action != "hello":
        return {}
    name = context.node_config.get("client-id", context.node_config.get("partition-id"))
    return {} if name is None else {"client-id": name}


def _hello(read):
    def answer(message, context, request):
        cls = get_model(request["model"])
        context.state["fedmm.model"] = ConfigRecord({"model": request["model"], "params": request["params"]})
        est = cls(**json.loads(request["params"]))
        if request.get("bounds") is not None:   # a private fit's public bounds: the client clips its rows into them
            context.state["fedmm.bounds"] = ConfigRecord({"bounds": request["bounds"]})
        data = read(context, est)
        if request.get("private"):   # a private fit: the sums would be a release
            return {"n": data.n_samples, "d": np.array([data.X.shape[1]])}
        return client_sums(data)
    return answer


def _read(load, context, est):
    X, y = load(context)
    data = FederatedData.from_input([X], None if y is None else [y], require_y=est.needs_y)
    if "fedmm.bounds" in context.state:
        data = _clip_to_bounds(data, context)
    return data


def _clip_to_bounds(data, context):
    """The client's rows clipped into a private fit's public bounds (``[lower, upper]`` in JSON, numbers or one
    per feature, as the server sent them at ``hello``), with a warning here, on the client, of how many were
    outside (:class:`fedmm.privacy.OutsideBoundsWarning`): nothing leaves the client."""
    d = data.X.shape[1]
    lower, upper = (np.broadcast_to(np.asarray(b, dtype=float), (d,))
                    for b in json.loads(context.state["fedmm.bounds"]["bounds"]))
    X, outside = clip_to_bounds(data.X, lower, upper)
    if outside.any():
        name = context.node_config.get("client-id", context.node_config.get("partition-id", "this client"))
        warnings.warn(outside_bounds_message([outside.sum()], data.n_samples, [name]), OutsideBoundsWarning,
                      stacklevel=2)
    return data.with_X(X)


class _Session:
    """A client's view of the fit: its family, its rows in the fit's units, its saved state."""

    def __init__(self, read, context, methods, train_fold=None):
        self.read = read
        self.methods = methods
        model = context.state["fedmm.model"]
        est = get_model(model["model"])(**json.loads(model["params"]))
        data = read(context, est)
        self.family = est.make_family(data.X.shape[0])
        self.context = context
        if "fedmm.units" in context.state:
            units = unflatten(Units, record_arrays(context.state["fedmm.units"]))
            data = units.transform(data)
            data = data.with_X(self.family.design(data.X))
        self.data = data
        if train_fold is not None:
            self.data = self.fold(int(train_fold), outside=True)

    def fold(self, fold, outside=False):
        """The client's rows in ``fold`` (or outside it), as dealt by the ``folds`` query."""
        folds = self.context.state["fedmm.folds"]
        index = client_fold(self.data.n_samples[0], int(folds["n_folds"]), int(folds["seed"]))
        rows = np.flatnonzero((index != fold) if outside else (index == fold))
        return self.data.take_rows(rows, [len(rows)])

    def state(self, slot=0):
        """The client's state in run ``slot`` (runs side by side, :func:`fedmm.engine.drive`; a private fit's: 0)."""
        saved = record_arrays(self.context.state[f"fedmm.state.{slot}"])
        return ClientState(unflatten(MixtureParams, saved, "params."), saved["w0"])

    def save(self, state, slot=0):
        self.context.state[f"fedmm.state.{slot}"] = _record(flatten(state._replace(prior=None)))

    def own(self):
        """The client's own last estimate in a private fit's stage (:mod:`fedmm.privacy`); its state's start
        before the stage's first round."""
        if "fedmm.own" not in self.context.state:
            return self.state().params
        return unflatten(MixtureParams, record_arrays(self.context.state["fedmm.own"]))

    def strategy(self, slot=0):
        """The method of run ``slot``, as its ``start`` named it."""
        return self.method(*json.loads(self.context.state["fedmm.strategy"][str(slot)]))

    def method(self, method, options):
        """The method named ``method`` with ``options``, if this client runs it."""
        if method not in self.methods:
            raise ValueError(f"This client does not run method {method!r}: give its class to "
                             "fedmm.flower.client_app(methods=[...]).")
        return self.methods[method](**options)


def _record(values):
    return encode(values)["arrays"]


def _with_session(read, answer, methods):
    def handle(message, context, request):
        return answer(_Session(read, context, methods, request.get("train_fold")), arrays(message.content), request)
    return handle


def _units(session, values, request):
    session.context.state["fedmm.units"] = _record(values)
    if not request.get("scale_reply", True):   # a private fit: the data's scale would be a release
        return {}
    session = _Session(session.read, session.context, session.methods)
    return {"scale": np.array([data_scale(session.data.X, session.data.y)])}


def _family_start(session, values, request):
    data = session.data
    if "features" in values:   # init="screened": a start on those features only
        features = np.asarray(values["features"], dtype=np.int64)
        if features.ndim != 1 or not features.size or features.min() < 0 or features.max() >= data.X.shape[1]:
            raise ValueError(f"features {features!r} are not a list of this client's {data.X.shape[1]} features")
        data = data.with_X(np.ascontiguousarray(data.X[:, features]))
    return flatten(client_family_starts(session.family, data, int(request["n_components"]), [int(request["seed"])]))


def _user_start(session, values, request):
    return flatten(user_start(session.family, session.data, values["weights"], values["theta"]))


def _start(session, values, request):
    """Runs side by side start (:meth:`fedmm.flower.server.FlowerClients.start_runs`): each slot's method, and its
    state from its parameters."""
    _start_runs(session, json.loads(request["runs"]), split_runs(values), "")
    if "fedmm.own" in session.context.state:   # a private fit's new stage starts from its start
        del session.context.state["fedmm.own"]
    return {}


def _start_runs(session, runs, parts, prefix):
    """Runs ``{slot: [method, options]}`` start from their parameters in ``parts`` (by slot, under ``prefix``)."""
    if not runs:
        return
    known = dict(session.context.state["fedmm.strategy"]) if "fedmm.strategy" in session.context.state else {}
    session.context.state["fedmm.strategy"] = ConfigRecord({**known, **{slot: json.dumps(method)
                                                                        for slot, method in runs.items()}})
    for slot in runs:
        params = unflatten(MixtureParams, parts[int(slot)], prefix)
        session.save(session.strategy(slot).client_start(params, session.data.n_samples), slot)


def _step(session, values, request):
    """A round of each run that asks this client (its slots in ``runs``; those in ``starts`` start first, from
    their arrays under ``start.``): a message per run."""
    parts, replies = split_runs(values), []
    _start_runs(session, json.loads(request.get("starts", "{}")), parts, "start.")
    for slot in json.loads(request["runs"]):
        message, state = session.strategy(slot).client_step(session.family, session.data, session.state(slot),
                                                            Broadcast(unflatten(MixtureParams, parts[slot])))
        session.save(state, slot)
        replies.append((slot, flatten(message)))
    return prefixed(replies)


def _local(session, values, request):
    """Each run's rounds of a method that runs on its own (:meth:`fedmm.flower.server.FlowerClients.local_runs`),
    run here alone from its start (:func:`fedmm.clients.local_rounds`): a reply per run, its parameters and
    rounds."""
    parts, replies = split_runs(values), []
    for slot, (method, options, max_iter, tol) in json.loads(request["runs"]).items():
        fit = local_rounds(session.method(method, options), session.family, session.data,
                           Broadcast(unflatten(MixtureParams, parts[int(slot)])), int(max_iter), float(tol))
        replies.append((int(slot), local_fit_arrays(fit)))
    return prefixed(replies)


def _loglik(session, values, request):
    parts = split_runs(values)
    return prefixed([(slot, {"loglik": session.family.loglik(session.data, unflatten(MixtureParams, parts[slot]))})
                      for slot in json.loads(request["runs"])])


def _fit_weights(session, values, request):
    params = unflatten(MixtureParams, values)
    which = values["which"].astype(bool)
    return {"weights": fit_weights(session.family, session.data, params, which, int(request["max_iter"]),
                                   float(request["tol"]))}


def _folds(session, values, request):
    session.context.state["fedmm.folds"] = ConfigRecord({"seed": int(request["seed"]),
                                                         "n_folds": int(request["n_folds"])})
    return {}


def _held_out(session, values, request):
    return {"loglik": session.family.loglik(session.fold(int(request["fold"])), unflatten(MixtureParams, values))}


def _private_round(read, methods):
    """A private fit's round under central noise (:mod:`fedmm.privacy`), through Flower's SecAgg+ (message type
    ``train``, :mod:`fedmm.flower.secure`): the release's components arrive as a ``FitIns``; the client replies
    with its part (:func:`_private_part`; its sums over its size, at the level of samples) scaled by its public
    ``factor``, and the probe (:mod:`fedmm.flower.secure`), which the mod clips to the range and masks before
    they leave."""
    def handle(message, context):
        fitins = compat.recorddict_to_fitins(message.content, keep_input=True)
        request = fitins.config
        session = _Session(read, context, methods)
        part = _private_part(session, MixtureParams(*parameters_to_ndarrays(fitins.parameters)), request)
        if "radius" in request:   # every field over what one row adds to it: all within [-1, 1]
            bounds = sums_bounds(session.family, part, float(request["radius"]))
            part = np.clip(sums_vector(part)[0] / session.data.n_samples[0] / bounds, -1.0, 1.0)
        else:   # each coordinate within the range (fedmm.privacy.bounded_updates)
            part = np.clip(part, -float(request["range"]), float(request["range"]))
        # Its public factor, the probe at the range's top, and the weight every client reports (flower.secure).
        part = np.append(float(request["factor"]) * part, float(request["range"]))
        fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([part]), 1, {})
        return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=message)
    return handle


def _private_step(session, values, request):
    """A private fit's round under local noise: the client's part (:func:`_private_part`) with its own Gaussian
    noise on it, drawn from its own entropy (noise the server could seed, it could subtract): ``2 sigma clip``
    on its update, or ``sigma`` times :func:`~fedmm.privacy.sums_noise` on its sums."""
    point = shared_point(unflatten(MixtureParams, values))
    part, sigma, rng = _private_part(session, point, request), float(request["sigma"]), np.random.default_rng()
    if "radius" in request:
        return {"update": sums_vector(noised(part, sigma * sums_noise(session.family, float(request["radius"])),
                                             rng))[0]}
    return {"update": part + 2.0 * sigma * float(request["clip"]) * rng.standard_normal(part.shape)}


def _private_part(session, point, request):
    """The client's part of a private round about the release ``point``: its clipped update from its own
    proportions and, under FedGrEM, its own components (each client private), or its
    :meth:`~fedmm.families.GaussianFamily.whitened_sums` at the released proportions (each row, ``radius`` in
    ``request``). It keeps its own estimate."""
    family, n, own = session.family, session.data.n_samples, session.own()
    if "radius" in request:
        # Every E-step at the released proportions: the client's own, from its own sums, would carry one of its
        # rows into every later round (fedmm.privacy.PrivateClients._own); they stay its fitted ones.
        own = own._replace(weights=released_proportions(point.weights)[None])
        sent = sent_params(family, point, own, n)
        sums = family.whitened_sums(session.data, sent, float(request["radius"]))
        session.context.state["fedmm.own"] = _record(flatten(sent._replace(weights=sums.N / n[:, None])))
        return sums
    sent = sent_params(family, point, own, n, request.get("centre_variance"), int(request["n_clients"]))
    reply, state = session.strategy().client_step(family, session.data, session.state(), Broadcast(sent))
    session.save(state)
    session.context.state["fedmm.own"] = _record(flatten(MixtureParams(reply.weights, reply.theta, reply.scale)))
    return clip_rows(encode_update(family, point.theta.shape[-1], reply, point), float(request["clip"]))[0]


def _together(session, values, request):
    """Queries of several kinds in one message (:meth:`fedmm.flower.runs.RunQueries.together`): each part, in order,
    answered as its own query would be from its arrays (under ``p<i>/``) and settings; the replies under the same
    prefixes."""
    parts = {}
    for key, value in values.items():
        head, _, rest = key.partition("/")
        parts.setdefault(head, {})[rest] = value
    reply = {}
    for i, action, settings in json.loads(request["parts"]):
        if action not in TOGETHER:
            raise ValueError(f"{action!r} does not go in a message with others ({', '.join(TOGETHER)} do)")
        answer = _ANSWERS[action](session, parts.get(f"p{i}", {}), {**request, **settings})
        reply.update({f"p{i}/{key}": value for key, value in answer.items()})
    return reply


_ANSWERS = {"units": _units, "family_start": _family_start, "user_start": _user_start, "start": _start,
            "step": _step, "local": _local, "private_step": _private_step, "loglik": _loglik,
            "fit_weights": _fit_weights, "folds": _folds, "held_out": _held_out, "together": _together}
