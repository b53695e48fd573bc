"""The server side: fedmm's engine over Flower's ``Grid``, trusting no reply.

:class:`FlowerClients` is a transport with the methods of :class:`fedmm.clients.LocalClients`, so the
estimator's own fit (units, starts, rounds, restarts) runs unchanged across separate parties
(:func:`fit`). Every reply is checked before the fit sees it: its tag (a reply to an earlier query is
stale), the exact set of arrays, their dtype (float64) and shapes, finiteness, and what the protocol
promises (a size that is the client's positive integer ``n_k``, proportions on the simplex, positive
variances, statistics that sum to ``n_k``). A reply that fails, an error the client raised, and a
client that does not answer within ``timeout`` are logged with the node id (logger
``"fedmm.flower"``; also in :attr:`FlowerClients.rejections`):

- in a round after a run's first, the client is not heard that round, and the server uses its last
  message (as with partial participation, :class:`fedmm.protocol.Participation`); fewer than
  ``min_clients`` replies fail the round with an error;
- in any other query (its data's sums, its start, a run's first round, where no earlier message
  stands in for it) the client is left out of the federation and :func:`fit` starts again without it.
"""

import copy
import itertools
import json
import logging
import warnings
from collections import Counter
from typing import NamedTuple

import numpy as np
from flwr.app import Message

from ..clients import client_family_starts
from ..data import FederatedData
from ..engine import divergence_bound
from ..families import MixtureParams
from ..methods import make_method
from ..protocol import Ledger, stack, take
from ..robust import fold_sizes, trusted_sizes
from ..units import FAR, far_from_others, moments_from_sums
from ._checks import _OWN_DATA, COPY_RTOL, Gone, _arrays_ok, _copies, _positive, _simplex_ok, _size_ok
from .codec import arrays, config, encode, flatten, payload, unflatten
from .runs import Part, RunQueries

__all__ = ["fit", "FlowerClients", "ClientsRejected", "Rejection"]

log = logging.getLogger("fedmm.flower")


class Rejection(NamedTuple):
    """One reply the server did not use: the node, the query (``action``), and why."""

    node: int
    action: str
    reason: str


class ClientsRejected(RuntimeError):
    """Clients failed a query that every client must answer; :func:`fit` goes on without them."""

    def __init__(self, rejections):
        self.nodes = sorted({r.node for r in rejections})
        super().__init__("; ".join(f"node {r.node} ({r.action}): {r.reason}" for r in rejections))


def fit(estimator, grid, *, timeout=None, min_clients=1):
    """Fit ``estimator`` on the clients behind ``grid``; call it in a ``ServerApp``'s main.

    Parameters
    ----------
    estimator : FederatedGaussianMixture or FederatedMixtureRegression
        Unfitted, with a client-server method (``fedgrem``, ``fedem``, ``pooled-em``, ``pooled-grem``). Every
        start runs here (each is made from what the clients send), the defaults included.
    grid : flwr.serverapp.Grid
    timeout : float, optional
        Seconds to wait for the replies to one query.
    min_clients : int
        The fewest clients a round may hear, and the fewest the federation may keep.

    Returns
    -------
    estimator
        Fitted: ``client_ids_`` are the clients' names (``client-id`` or ``partition-id`` in their node
        config) when every client has a distinct one, in their order, else their node ids in increasing
        order; ``flower_rejections_`` lists every reply the server did not use (by node id).
    """
    strategy = make_method(estimator.method)
    if strategy.name is None:
        raise ValueError(f"{type(strategy).__name__} has no name: a method run on Flower needs one (its class "
                         "attribute name), by which the clients' client_app(methods=...) know it.")
    if estimator.model is None:
        raise ValueError(f"{type(estimator).__name__} has no model name: a model fitted on Flower needs one (its "
                         "class attribute model), by which the clients build it (fedmm.estimators.MODELS).")
    if not strategy.client_server or strategy.per_client:
        raise ValueError(f"method={estimator.method!r} is not a client-server method; on Flower use fedgrem, "
                         "fedem, pooled-em or pooled-grem.")
    privacy = getattr(estimator, "privacy", None)
    if privacy is not None and (getattr(strategy, "participation", 1.0) < 1.0 or getattr(strategy, "dropout", 0.0) > 0):
        raise ValueError("A private fit across parties hears every client in every round (its noise is "
                         "calibrated for all their shares): use participation=1 and dropout=0.")
    if not strategy.robust:
        warnings.warn(f"method={estimator.method!r} makes no promise against malicious parties: one party's "
                      "well-formed replies can move the shared estimate (docs/threat-model.md). For federations "
                      "whose parties you do not all trust, use method='fedgrem'.", UserWarning, stacklevel=2)
    nodes = sorted(int(n) for n in grid.get_node_ids())
    rejections = []
    while True:
        if len(nodes) < max(min_clients, 1):
            raise RuntimeError(f"Only {len(nodes)} client(s) left after rejecting replies (min_clients="
                               f"{min_clients}): " + "; ".join(f"node {r.node} ({r.action}): {r.reason}"
                                                               for r in rejections))
        clients = FlowerClients(grid, nodes, estimator, timeout=timeout, min_clients=min_clients,
                                rejections=rejections)
        try:
            clients.hello()
            names = [clients.names.get(k) for k in range(len(nodes))]
            named = None not in names and len(set(names)) == len(names)
            if named:
                # Clients with names (partition ids, site names) are numbered in their order, whatever
                # node ids the SuperLink gave them: the fit then does not depend on those.
                clients.reorder(sorted(range(len(nodes)), key=lambda k: names[k]))
                nodes, names = clients.nodes, sorted(names)
            ids = np.array(names if named else nodes)   # a copied name (a Sybil's) does not name two clients
            estimator.fit_clients(clients, ids, clients.n_features)
            estimator.name_suspects(strategy, ids[sorted(clients.relabelled)])
        except ClientsRejected as error:
            log.warning("fedmm.flower: starting again without node(s) %s: %s", error.nodes, error)
            nodes = [n for n in nodes if n not in error.nodes]
            continue
        estimator.flower_rejections_ = list(rejections)
        return estimator


#: After this many rejected replies in a row a node leaves the federation (:meth:`FlowerClients._strike`): its last
#: good message stood in for it three rounds, and a party bad for good would otherwise keep the rounds from settling.
STRIKES = 3


class FlowerClients(RunQueries):
    """The clients behind a Flower ``Grid``, as a transport of :mod:`fedmm.clients` (see the module docstring).

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    nodes : list of int
        The clients' node ids, in the order the fit numbers them.
    estimator : the estimator whose model the clients build
    timeout : float, optional
    min_clients : int
    rejections : list, optional
        Where to record :class:`Rejection`\\ s (a new list by default).
    """

    def __init__(self, grid, nodes, estimator, *, timeout=None, min_clients=1, rejections=None):
        self.grid, self.nodes, self.estimator = grid, list(nodes), estimator
        self.timeout, self.min_clients = timeout, min_clients
        self.rejections = [] if rejections is None else rejections
        self._queries = itertools.count(1)   # shared with the views of :meth:`training`: every query's tag is new
        self._settings = {}                  # sent with every query: a view's ``train_fold``
        self._n_folds = None
        self.names = {}
        self.ledger = Ledger(len(self.nodes))  # what this federation's queries carried: the fit's communication_
        self._runs = {}                       # by slot: (method, sends statistics, first round to come)
        self.relabelled = set()               # positions of the clients whose replies came relabelled
        self._template = None
        self.data_scale = None
        self._sums = None                     # the clients' sums, from hello
        self.strikes = Counter()              # by node: queries in a row whose reply was rejected

    @property
    def n_clients(self):
        return len(self.nodes)

    # --- queries ---------------------------------------------------------------------

    def hello(self):
        """Every client reads its data and sends its size and sums; the server builds the family. For a private
        fit a client sends its size and its number of features only (its sums would be a release)."""
        est = self.estimator
        settings = json.dumps(est.family_params())
        private = getattr(est, "privacy", None) is not None
        # A private fit's public bounds go to every client, which clips its own rows into them and warns locally.
        bounds = {"bounds": json.dumps([np.asarray(b, dtype=float).tolist() for b in est.privacy.bounds])} \
            if private else {}
        raw = self._send("hello", [{}] * self.n_clients, model=est.model, params=settings,
                         private=private, **bounds)
        name_ok = self._name_check(raw)
        if private:
            # Sizes alone repeat between honest clients: no copy check (it needs replies computed from the rows).
            replies = self._check(raw, "hello", lambda k, v: _arrays_ok(v, {"n": (1,), "d": (1,)})
                                  or _size_ok(v["n"][0]) or _size_ok(v["d"][0]) or name_ok(k), required=True,
                                  own_data=False)
            self.n_samples = np.array([int(replies[k]["n"][0]) for k in range(self.n_clients)])
            self.n_features = int(np.bincount([int(replies[k]["d"][0]) for k in replies]).argmax())
            self.family = est.make_family(int(trusted_sizes(self.n_samples).sum()))
            return
        widths = [v["sum_x"].shape[0] for v in raw.values() if isinstance(v, dict) and "sum_x" in v
                  and np.ndim(v["sum_x"]) == 1]
        if not widths:
            raise ClientsRejected([Rejection(self.nodes[k], "hello", v if isinstance(v, str) else "no sums of x")
                                   for k, v in raw.items()])
        d = int(np.bincount(widths).argmax())  # the federation's feature count: most clients'
        shapes = est.moment_shapes(d)
        replies = self._check(raw, "hello", lambda k, v: _arrays_ok(v, shapes) or _size_ok(v["n"][0]) or name_ok(k),
                              required=True)
        self._sums = sums = [replies[k] for k in range(self.n_clients)]
        self._moments = moments_from_sums(sums)
        far = far_from_others(sums)
        if far.any():
            self._reject([Rejection(self.nodes[k], "hello", f"sums put its data beyond {FAR:g} robust scales from "
                                    "the federation's") for k in np.flatnonzero(far)], required=True)
        self.n_samples = np.array([int(replies[k]["n"][0]) for k in range(self.n_clients)])
        self.n_features = d
        # The backend for so many rows: the trusted sizes' sum, so that a claim of 1e18 rows picks nothing.
        self.family = est.make_family(int(trusted_sizes(self.n_samples).sum()))

    def reorder(self, order):
        """The clients numbered in ``order`` (their positions now), as if :meth:`hello` had asked them so: what it
        learnt of each goes with it, and the moments are summed again in the new order (a sum's last bit depends
        on its order). The ledger stays: ``hello`` carried the same bytes to and from every client."""
        self.nodes = [self.nodes[k] for k in order]
        self.names = {i: self.names[k] for i, k in enumerate(order) if k in self.names}
        self.n_samples = self.n_samples[order]
        if self._sums is not None:
            self._sums = [self._sums[k] for k in order]
            self._moments = moments_from_sums(self._sums)

    def _name_check(self, raw):
        """A check of each client's name from its reply to ``hello`` (None: fine). The server orders the clients by
        their names (:func:`fit`), so a name is an int or a str, of the kind most clients' names are (a party named
        ``"zzz"`` among partition ids, or ``[1, 2]``, cannot be ordered with the others); a client without one is
        numbered by its node id, as are all when any is."""
        names = [self.names.get(k) for k in raw]
        kinds = Counter(type(name) for name in names if type(name) in (int, str))
        kind = kinds.most_common(1)[0][0] if kinds else None

        def check(k):
            name = self.names.get(k)
            if name is None or type(name) is kind:
                return None
            if type(name) not in (int, str):
                return f"client-id {name!r} is a {type(name).__name__}, not an int or a str"
            return f"client-id {name!r} is a {type(name).__name__}, but most clients' names are {kind.__name__}s"
        return check

    def moments(self):
        return self._moments

    def set_units(self, units, scale_reply=True):
        values = flatten(units._replace(y_shift=np.array([units.y_shift]), y_scale=np.array([units.y_scale])))
        if not scale_reply:   # a private fit: the data's scale would be a release
            self._ask("units", [values] * self.n_clients, lambda k, v: _arrays_ok(v, {}), required=True,
                      scale_reply=False)
            return
        replies = self._ask("units", [values] * self.n_clients,
                            lambda k, v: _arrays_ok(v, {"scale": (1,)}), required=True)
        # The divergence check's unit is a claim too: the median client's, so that no one party can switch the
        # check off (a scale of 1.7e308) or set it below the others' data.
        self.data_scale = float(np.median([replies[k]["scale"][0] for k in sorted(replies)]))

    def family_starts(self, seeds, n_components, which=None, features=None):
        return self._send_parts([self._family_starts_part(seeds, n_components, which, features)])[0]

    def _family_starts_part(self, seeds, n_components, which=None, features=None):
        index = np.arange(self.n_clients) if which is None else np.asarray(which)
        # A start of its own needs n_components rows. In one process too few rows are the user's data, and the fit
        # raises (LocalClients.family_starts); here they are a party's claim, and the party leaves.
        self._reject([Rejection(self.nodes[k], "family_start", f"n = {self.n_samples[k]} samples, fewer than "
                                f"n_components={n_components}: it cannot make its own start")
                      for k in index if self.n_samples[k] < n_components], required=True)
        params = self._params_template(n_components, None if features is None else len(features))
        sent = {} if features is None else {"features": np.asarray(features, dtype=np.int64)}
        return Part("family_start", {int(k): sent for k in index}, self._params_check(params),
                    lambda replies: stack([unflatten(MixtureParams, replies[k]) for k in index]),
                    config={int(k): {"seed": int(s), "n_components": int(n_components)} for k, s in zip(index, seeds)})

    def user_start(self, weights, theta):
        K = self.n_clients
        theta = np.asarray(theta, dtype=float)
        theta = np.broadcast_to(theta, (K,) + theta.shape[-2:]) if theta.ndim == 2 else theta
        R = theta.shape[1]
        weights = np.full((K, R), 1.0 / R) if weights is None else np.asarray(weights, dtype=float)
        weights = np.broadcast_to(weights, (K, R)) if weights.ndim == 1 else weights
        rows = [{"weights": weights[k:k + 1], "theta": theta[k:k + 1]} for k in range(K)]
        replies = self._ask("user_start", rows, self._params_check(self._params_template(R)), required=True)
        return stack([unflatten(MixtureParams, replies[k]) for k in range(K)])

    def private_step(self, release, length, settings):
        """(K, length): every client's reply to a private round under local noise (the query ``private_step``:
        ``release`` the released components, flattened; :class:`fedmm.flower.secure.LocalNoiseRounds`)."""
        replies = self._ask("private_step", [release] * self.n_clients,
                            lambda k, v: _arrays_ok(v, {"update": (length,)}), required=True, **settings)
        return np.stack([replies[k]["update"] for k in range(self.n_clients)])

    def private(self, average):
        """The transport of a private fit's rounds: secure aggregation under central noise
        (:class:`fedmm.flower.secure.SecureRounds`), each client's own noise under local noise
        (:class:`fedmm.flower.secure.LocalNoiseRounds`)."""
        from .secure import LocalNoiseRounds, SecureRounds
        return (SecureRounds if average.noise == "central" else LocalNoiseRounds)(self, average)

    def deal_folds(self, n_folds, seeds):
        """Every client deals its rows into ``n_folds`` folds from its seed (:func:`fedmm.robust.client_fold`)."""
        self._ask("folds", [{}] * self.n_clients, lambda k, v: _arrays_ok(v, {}), required=True,
                  config_rows=[{"seed": int(s)} for s in seeds], n_folds=int(n_folds))
        self._n_folds = int(n_folds)

    def training(self, fold):
        """The clients answering from their rows outside ``fold``: a transport of its own, whose queries say so."""
        view = copy.copy(self)
        view._settings = {"train_fold": int(fold)}
        view.n_samples = self.n_samples - fold_sizes(self.n_samples, self._n_folds, fold)
        return view

    def held_out_loglik(self, fold, params):
        index = np.flatnonzero(fold_sizes(self.n_samples, self._n_folds, fold))
        replies = self._ask("held_out", [flatten(take(params, k)) for k in index],
                            lambda k, v: _arrays_ok(v, {"loglik": (1,)}), index, required=True, fold=int(fold))
        total = np.zeros(self.n_clients)
        total[index] = [replies[k]["loglik"][0] for k in index]
        return total

    # --- what a valid reply looks like -------------------------------------------------

    def _params_template(self, n_components, n_features=None):
        """Parameters of the right shapes, from a start the server makes on synthetic rows (no client's); on
        ``n_features`` features (a start on some features only, not kept as the fit's template)."""
        rng = np.random.RandomState(0)
        n = 4 * n_components + 4
        y = [rng.standard_normal(n)] if self.family.needs_y else None
        dummy = FederatedData.from_input([rng.standard_normal((n, n_features or self.n_features))], y,
                                         require_y=self.family.needs_y)
        dummy = dummy.with_X(self.family.design(dummy.X))
        params = client_family_starts(self.family, dummy, n_components, [0])
        if n_features is None:
            stats = self.family.estep(dummy, params)[1]
            self._stats_type, self._template = type(stats), (params, stats)
        return params

    def _message_template(self, R, sends_stats):
        if self._template is None or self._template[0].weights.shape[1] != R:
            self._params_template(R)
        params, stats = self._template
        shapes = {"n": (1,), "loglik": (1,), **{k: v.shape for k, v in flatten(params).items()}}
        if sends_stats:
            shapes.update({f"stats.{k}": v.shape for k, v in flatten(stats).items()})
        return shapes

    def _params_check(self, params):
        shapes = {k: v.shape for k, v in flatten(params).items()}
        return lambda k, v: (_arrays_ok(v, shapes) or _simplex_ok(v["weights"]) or _positive(v["scale"], "scale")
                             or self._plausible(k, v))

    def _plausible(self, k, v):
        """Why parameters or sums are beyond what any data of the federation's scale gives (None when not):
        parameters beyond :func:`fedmm.engine.divergence_bound`, variances beyond its square, sums beyond
        ``n_k`` times its square. Such a reply is refused like a malformed one: it cannot switch off the
        divergence check for the others, or make the server raise on its behalf."""
        if self.data_scale is None:
            return None
        bound = divergence_bound(self.data_scale)
        if np.abs(v["theta"]).max() > bound:
            return f"parameters beyond {bound:.3g} (1e8 times the median client's data scale)"
        if v["scale"].max() > bound ** 2:
            return f"variances beyond {bound ** 2:.3g}"
        n = self.n_samples[k]
        for key in (key for key in v if key.startswith("stats.") and key != "stats.N"):
            if np.abs(v[key]).max() > n * bound ** 2:
                return f"{key} beyond n_k times {bound ** 2:.3g}"
        return None

    def _message_check(self, k, v, shapes):
        problem = (_arrays_ok(v, shapes) or _simplex_ok(v["weights"]) or _positive(v["scale"], "scale")
                   or self._plausible(k, v))
        if problem:
            return problem
        if v["n"][0] != self.n_samples[k]:  # also refuses a size that is not an integer
            return f"n = {v['n'][0]:g}, but this client has {self.n_samples[k]} samples"
        if "stats.N" in v:
            N = v["stats.N"]
            if np.any(N < 0) or abs(N.sum() - self.n_samples[k]) > 1e-6 * self.n_samples[k]:
                return "its statistics' sizes N are negative or do not sum to its n"
        return None

    # --- sending ----------------------------------------------------------------------

    def _ask(self, action, rows, check, index=None, *, required, config_rows=None, **settings):
        """Send ``rows`` to the clients ``index`` (all by default), check the replies: ``{client: arrays}``."""
        index = np.arange(self.n_clients) if index is None else np.asarray(index)
        raw = self._send(action, rows, index, config_rows, **settings)
        return self._check(raw, action, check, required)

    def _send(self, action, rows, index=None, config_rows=None, record=None, **settings):
        """``{client: arrays, or the reason there are none}`` for one query (in the ledger as ``record``, by
        default ``action``)."""
        index = np.arange(self.n_clients) if index is None else np.asarray(index)
        tag = f"{action}-{next(self._queries)}"
        config_rows = config_rows or [{}] * len(index)
        messages = [Message(encode(row, tag=tag, **self._settings, **settings, **extra), dst_node_id=self.nodes[k],
                            message_type=f"query.{action}") for k, row, extra in zip(index, rows, config_rows)]
        position = {self.nodes[k]: k for k in index}
        raw = {}                                    # in the order the replies arrive (the copy check's)
        answered, up, sent = set(), {}, None
        for reply in self.grid.send_and_receive(messages, timeout=self.timeout):
            node = reply.metadata.src_node_id
            sent = sent or {m.metadata.message_id: m.metadata.dst_node_id for m in messages}  # ids given on sending
            to = sent.get(reply.metadata.reply_to_message_id)
            if reply.has_error() and to != node and to in position and to not in answered:
                # The SuperLink answers for a node that stopped sending heartbeats (Flower's NODE_UNAVAILABLE):
                # an error in reply to the message sent to it. That node is gone, not late.
                answered.add(to)
                raw[position[to]] = Gone(f"the SuperLink reports the node gone: {reply.error.reason}")
                continue
            if node not in position or node in answered:
                log.warning("fedmm.flower: ignored an unexpected reply from node %s to %s", node, action)
                continue
            answered.add(node)
            k = position[node]
            up[k] = 0 if reply.has_error() else payload(reply.content)
            if reply.has_error():
                raw[k] = f"the client raised an error: {reply.error.reason}"
                continue
            try:
                values, echoed = arrays(reply.content), config(reply.content).get("tag")
            except Exception as error:  # anything a client could put in a record
                raw[k] = f"malformed reply ({type(error).__name__}: {error})"
                continue
            raw[k] = values if echoed == tag else f"stale reply (tag {echoed!r}, expected {tag!r})"
            self.names[k] = config(reply.content).get("client-id")
        raw.update({k: "no reply in time" for k in index if k not in raw})
        method = settings.pop("method", "")
        down = [payload(m.content) for m in messages]
        self.ledger.record(record or action, index, down, [up.get(k, 0) for k in index], [k in up for k in index],
                           method=method)
        about = ", ".join(filter(None, (record, method)))   # a message of several queries names them
        log.info("fedmm.flower: query %s%s: %d of %d clients replied, %d bytes down, %d up", tag,
                 f" ({about})" if about else "", len(up), len(index), sum(down), sum(up.values()))
        return raw

    def _check(self, raw, action, check, required, own_data=None):
        good, failed = self._judge(raw, action, check, own_data)
        self._settle(raw, failed, failed if required else [])
        return good

    def _judge(self, raw, action, check, own_data=None):
        """The replies ``raw`` that pass ``check`` (``{client: arrays}``), and the :class:`Rejection`\\ s of the
        others."""
        own_data = action in _OWN_DATA if own_data is None else own_data
        reasons = {k: values if isinstance(values, str) else check(k, values) for k, values in raw.items()}
        if own_data:
            # A reply computed from a client's own data that repeats another node's is a copy (a Sybil's, a mimic's
            # scaled by 1 + 1e-12, or the same data loaded twice): it counts once, the one that arrived first, as a
            # copy can only be made of a reply already sent.
            for k, j in _copies({k: raw[k] for k in raw if not reasons[k]}).items():
                reasons[k] = f"identical to node {self.nodes[j]}'s reply (to {COPY_RTOL:g} in every array): a copy " \
                             "counts once"
        good, failed = {}, []
        for k, values in raw.items():
            if reasons[k]:
                failed.append(Rejection(self.nodes[k], action, reasons[k]))
            else:
                good[k] = values
        return good, failed

    def _settle(self, heard, failed, fatal):
        """Log and record the rejections ``failed`` of one message's replies ``heard``. Those in ``fatal`` (of queries
        that every client must answer) leave the federation at once (:class:`ClientsRejected`), all of them when a
        node is gone (a query that could go on without it too: the fit starts again without it, rather than a run
        going on with its last message for as long as it lasts), and so do nodes now rejected in :data:`STRIKES`
        queries in a row."""
        self._reject(failed, False)
        fatal = failed if any(isinstance(values, Gone) for values in heard.values()) else fatal
        if fatal:
            raise ClientsRejected(fatal)
        struck = self._strike(heard, failed)
        if struck:
            raise ClientsRejected(struck)

    def _strike(self, heard, failed):
        """The rejections ``failed`` of nodes now rejected in :data:`STRIKES` queries in a row (of those asked,
        ``heard``): nothing the fit can use has come from them since, so they leave the federation."""
        bad = {r.node for r in failed}
        for k in heard:
            self.strikes[self.nodes[k]] = self.strikes[self.nodes[k]] + 1 if self.nodes[k] in bad else 0
        return [r for r in failed if self.strikes[r.node] >= STRIKES]

    def _reject(self, failed, required):
        for r in failed:
            log.warning("fedmm.flower: rejected node %s's reply to %s: %s", r.node, r.action, r.reason)
        self.rejections.extend(failed)
        if failed and required:
            raise ClientsRejected(failed)

