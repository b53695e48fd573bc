"""A private fit's rounds across parties: the clients' clipped updates summed under Flower's SecAgg+.

Under central noise (:mod:`fedmm.privacy`) the server needs only the weighted mean of the clients' clipped
updates, to which it adds the noise. Here each client computes its update on its own rows and sends it masked,
through Flower's SecAgg+ protocol (Bell et al., CCS 2020; ``flwr.server.workflow.SecAggPlusWorkflow`` on the
server, ``flwr.client.mod.secaggplus_mod`` on each client): the server unmasks only their sum, never one
client's update. Each client's proportions, and under FedGrEM its own components, stay with it.

What the server learns of a client: its size (public, as in every private fit) and nothing of its rows but
through the released sums. What one party can do to the sum is bounded where SecAgg+ can bound it
(``docs/threat-model.md``, "Under secure aggregation"):

- **each coordinate** of every party's vector is clipped to a range before it is quantized and masked: for
  client-level privacy :func:`~fedmm.privacy.coordinate_range`, ``2 clip / sqrt(m)``
  (:func:`~fedmm.privacy.bounded_updates`), so that a party at the range's edges adds a vector of norm ``2 clip``
  at most, not ``sqrt(m) clip``; for the sums of each row's privacy, each field over what one row can add to it
  (:func:`~fedmm.privacy.sums_bounds`), within ``[-1, 1]``;
- **the weights are public**: each party scales its own vector by its share over the largest, fixed from the
  sizes given before the rounds, and every party reports the same weight to SecAgg+ (which divides the sum by
  the reported weights' total); a **probe**, one more coordinate every honest party sets at the range's top,
  reads that total back, and the server undoes it (:func:`reported_total`): a party that reports fifty times its
  weight changes nothing;
- **the aggregate** of honest clipped updates lies in the ball of radius ``clip``, and the server projects the
  unmasked mean there, whatever a party sent;
- a party that drops out of the protocol adds nothing that round: its share is lost, not redistributed, and the
  fit goes on.

A party that crafts its masked values outside the quantization (SecAgg+ sums modulo ``2^32``) can move the sum
of a coordinate anywhere within what all parties' values can sum to, and fake the probe: no check of the sum
alone can tell (range proofs would); the projection onto the ball still bounds the round's aggregate.

Every coordinate is rounded stochastically to one of ``quantization_range`` levels of its range: the mean's
error per coordinate is at most one level, ``2 range / quantization_range``, below ``1e-6`` of the clip for up
to 500 clients (``tests/test_flower.py`` measures it), against the noise's ``2 sigma clip / K``.
"""

import itertools
import logging

import numpy as np
import flwr.compat.common.recorddict_compat as compat
from flwr.app import ConfigRecord, Context, RecordDict
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import SimpleClientManager
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey

from ..families import MixtureParams
from ..privacy import (PrivateSums, PrivateTransport, bounded_sums, clip_rows, coordinate_range,
                       decode, encode, local_update_limit, released_proportions, scale_of, shared_point, sums_bounds,
                       sums_from_vector)
from ..robust import trusted_sizes
from ..protocol import ClientMessage
from .codec import all_bytes, flatten

__all__ = ["SecureRounds", "LocalNoiseRounds", "QUANTIZATION_RANGE", "quantization_range", "reported_total"]

log = logging.getLogger("fedmm.flower")

#: Flower's default number of quantization levels; fewer for many clients, so that the sum of ``K`` quantized
#: updates stays below the masks' modulus, ``2^32``.
QUANTIZATION_RANGE = 2 ** 22


def quantization_range(n_clients):
    """The quantization levels for ``n_clients``: ``2^22``, or fewer so that ``K`` of them sum below ``2^31``."""
    return min(QUANTIZATION_RANGE, 2 ** 31 // n_clients)


def reported_total(probe, n_parties, top):
    """The total of the weights SecAgg+ divided the sum by, read from the probe's mean ``probe``: every honest
    party's probe is ``top`` (the range's top) at weight 1, so the sum of probes is ``n_parties top`` and their
    mean ``n_parties top`` over the total. A party that reports a larger weight, and otherwise follows the
    protocol, sends its probe at ``top`` too (its values are clipped there): its weight is then undone. A mean at
    or below 0 (no honest reading) counts as ``n_parties``."""
    return float(n_parties * top / probe) if probe > 0 else float(n_parties)


class _Node:
    """What SecAgg+'s workflow needs of a client proxy: its node id."""

    def __init__(self, node_id):
        self.node_id = node_id


class _Aggregate:
    """The part of a Flower ``Strategy`` SecAgg+'s workflow calls: the round's instructions per node, and the
    unmasked mean it hands back (``result``; None until the protocol completes)."""

    def __init__(self, instructions):
        self.instructions, self.result, self.contributors = instructions, None, 0

    def configure_fit(self, server_round, parameters, client_manager):
        return self.instructions

    def aggregate_fit(self, server_round, results, failures):
        self.result, self.contributors = results[0][1].parameters if results else None, len(results)
        return self.result, {}


class _Recorded:
    """The grid, recording what each SecAgg+ stage sent and received in the fit's ledger."""

    def __init__(self, clients, method):
        self._clients, self._method = clients, method

    def send_and_receive(self, messages, *, timeout=None):
        clients = self._clients
        position = {node: k for k, node in enumerate(clients.nodes)}
        replies = list(clients.grid.send_and_receive(messages, timeout=timeout))
        index = np.array([position[m.metadata.dst_node_id] for m in messages])
        up = {position.get(r.metadata.src_node_id): 0 if r.has_error() else all_bytes(r.content) for r in replies}
        clients.ledger.record("secure-step", index, [all_bytes(m.content) for m in messages],
                              [up.get(k, 0) for k in index], [k in up for k in index], method=self._method)
        return replies


class SecureRounds(PrivateTransport):
    """The transport of a private fit's rounds over :class:`fedmm.flower.server.FlowerClients` under central noise:
    every round a SecAgg+ aggregation of the clients' clipped updates (see the module docstring).

    A round's replies are the unmasked mean, as every client's message (the server never has another), with the
    clients' public sizes, so that :class:`fedmm.privacy.PrivateAverage` adds the noise of the largest share to
    it. Every client is asked in every round (participation=1); one that drops out of the protocol loses its
    share that round.
    """

    def __init__(self, clients, average):
        super().__init__(clients, average)
        # Under central noise every coordinate within coordinate_range: what SecAgg+ can hold a party to.
        average.bounded = average.noise == "central"
        self._rounds = itertools.count(1)
        self._method = ""

    def start(self, strategy, params):
        self._clients.start(strategy, params)
        self._method = strategy.name

    def step(self, strategy, broadcast, heard=None):
        K, average = self.n_clients, self._average
        if heard is not None and len(heard) < K:
            raise ValueError("Under secure aggregation every client takes part in every round (participation=1, "
                             "dropout=0): the noise is calibrated for the shares of all of them.")
        point = shared_point(broadcast.params)
        every = lambda a: np.broadcast_to(a, (K,) + a.shape).copy()  # noqa: E731
        if isinstance(average, PrivateSums):
            return self._sums(point, average, every), np.arange(K)
        share = average.share   # fixed from the sizes given before the rounds, none read from a reply
        m = encode(self.family, average.d, MixtureParams(*(a[None] for a in point)), point).shape[1]
        mean = share.max() * self._secure_sum(point, self._settings(average), share / share.max(),
                                              coordinate_range(average.clip, m), m)
        # Honest clipped updates' weighted mean lies in the ball of radius clip: whatever a party sent, the
        # round's aggregate is put back in it (a projection: the sensitivity stays that of the clipped updates).
        mean = clip_rows(mean[None], average.clip)[0]
        weights, theta, log_scale = decode(self.family, average.d, mean, point)
        scale = scale_of(self.family, average.d, log_scale, point)
        messages = ClientMessage(self.n_samples, np.zeros(K), every(weights), every(theta), every(scale), None)
        return messages, np.arange(K)

    def _sums(self, point, average, every):
        """A round at the level of samples: each client's :func:`~fedmm.privacy.whitened_sums` over its size and
        over what one row adds to each field (:func:`~fedmm.privacy.sums_bounds`: all within ``[-1, 1]``, the
        range SecAgg+ clips to), scaled by its trusted size over the largest (a size is a claim: as in one
        process, :func:`~fedmm.privacy.bounded_sums`), so that the secure sum scaled back is the sums' total (the
        one message the server hands :class:`~fedmm.privacy.PrivateSums`). A party at the range's edges adds
        what one client of the largest trusted size whose every row sits at the rows' radius could."""
        n = self.n_samples
        weights = trusted_sizes(n)
        R, p = point.theta.shape
        bounds = sums_bounds(self.family, sums_from_vector(np.zeros((1, R * (1 + p + point.scale.shape[-1]))),
                                                           self.family, point), average.radius)
        total = weights.max() * bounds * self._secure_sum(point, self._settings(average), weights / weights.max(),
                                                          1.0, bounds.size)
        return ClientMessage(n, np.zeros(len(n)), np.zeros((len(n), R)), every(point.theta), every(point.scale),
                             sums_from_vector(total[None], self.family, point))

    def _settings(self, average):
        """What a client needs to compute its part of a round (:func:`fedmm.flower.client._private_part`)."""
        if isinstance(average, PrivateSums):
            return {"radius": float(average.radius), "n_clients": self.n_clients}
        settings = {"clip": float(average.clip), "n_clients": self.n_clients}
        if average.form.personal:
            settings["centre_variance"] = float(average.centre_variance)
        return settings

    def _secure_sum(self, point, settings, factors, bound, m):
        """``sum_k factor_k v_k`` (m,) under SecAgg+ of the clients' replies ``v_k`` to the release ``point`` and
        ``settings``, every coordinate within ``bound`` (see the module docstring): each client scales its own
        vector by its public ``factor`` (at most 1) and appends the probe; every client reports the same weight,
        and the probe's mean undoes the weights' total SecAgg+ divided by (:func:`reported_total`). Clients that
        drop out of the protocol add nothing: their shares are lost, not redistributed."""
        clients, K = self._clients, self.n_clients
        round_ = next(self._rounds)
        parameters = ndarrays_to_parameters([point.weights, point.theta, point.scale])
        instructions = [(_Node(node), FitIns(parameters, {**settings, "range": float(bound), "factor": float(f)}))
                        for node, f in zip(clients.nodes, factors)]
        aggregate = _Aggregate(instructions)
        context = LegacyContext(Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={}),
                                strategy=aggregate, client_manager=SimpleClientManager())
        context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: round_})
        context.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(parameters, True)
        workflow = SecAggPlusWorkflow(num_shares=1.0, reconstruction_threshold=0.5, max_weight=1.0,
                                      clipping_range=float(bound), quantization_range=quantization_range(K),
                                      timeout=clients.timeout)
        workflow(_Recorded(clients, self._method), context)
        if aggregate.result is None:
            log.warning("fedmm.flower: secure aggregation round %d completed with no client: it adds nothing; see "
                        "Flower's log", round_)
            return np.zeros(m)
        if aggregate.contributors < K:
            log.warning("fedmm.flower: secure aggregation round %d heard %d of %d clients: the others' shares are "
                        "lost this round", round_, aggregate.contributors, K)
        mean = parameters_to_ndarrays(aggregate.result)[0]
        return mean[:m] * reported_total(mean[-1], aggregate.contributors, bound)

    def final(self, point, centre_variance):
        """The fitted parameters as the server has them: the release, with the released mean proportions, for
        every client (each client's own proportions, and under FedGrEM its own components, stay with it)."""
        K = self.n_clients
        return MixtureParams(*(np.broadcast_to(a, (K,) + a.shape).copy()
                               for a in (released_proportions(point.weights), point.theta, point.scale)))


class LocalNoiseRounds(SecureRounds):
    """The transport of a private fit's rounds under local noise over :class:`fedmm.flower.server.FlowerClients`:
    every round the query ``private_step``, to which each client replies with its clipped update (each row
    private: its E-step's sums) with its own noise on it, in the clear, since the noise is what protects it.
    The server checks each reply's shape and finiteness and hands them, as the clients' messages, to the
    server's side (:class:`fedmm.privacy.PrivateAverage`: FedGrEM's robust centre, FedEM's average;
    :class:`fedmm.privacy.PrivateSums`: their total)."""

    def step(self, strategy, broadcast, heard=None):
        K, average, family = self.n_clients, self._average, self.family
        if heard is not None and len(heard) < K:
            raise ValueError("A private fit across parties hears every client in every round (participation=1, "
                             "dropout=0).")
        point = shared_point(broadcast.params)
        sums = isinstance(average, PrivateSums)
        settings = self._settings(average) | {"sigma": float(average.sigma)}
        one = MixtureParams(*(a[None] for a in point))
        R, p = point.theta.shape
        m = R * (1 + p + point.scale.shape[-1] * family.estimates_scale) if sums else \
            encode(family, average.d, one, point).shape[1]
        update = self._clients.private_step(flatten(one), m, settings)
        every = lambda a: np.broadcast_to(a, (K,) + a.shape).copy()  # noqa: E731
        if sums:   # in the clear: each party's sums bounded by its size's (bounded_sums)
            total = bounded_sums(family, sums_from_vector(update, family, point), self.n_samples, average.radius,
                                 average.row_sd)
            return ClientMessage(self.n_samples, np.zeros(K), np.zeros((K, point.weights.size)), every(point.theta),
                                 every(point.scale), total), np.arange(K)
        update = self._honest(update, local_update_limit(average.clip, average.sigma, m))
        weights, theta, log_scale = decode(family, average.d, update, point)
        return ClientMessage(self.n_samples, np.zeros(K), weights, theta, scale_of(family, average.d, log_scale, point),
                             None), np.arange(K)

    def _honest(self, update, limit):
        """The parties' noisy updates (K, m), each beyond ``limit`` (:func:`~fedmm.privacy.local_update_limit`: no
        honest party's reaches it) replaced by zero, the release unmoved by it: its share is lost, not given to
        the others, and its node is named in the log."""
        beyond = np.linalg.norm(update, axis=1) > limit
        for k in np.flatnonzero(beyond):
            log.warning("fedmm.flower: dropped node %s's private update of norm %.3g this round: beyond %.3g, the "
                        "most a clipped update with its noise reaches", self._clients.nodes[k],
                        np.linalg.norm(update[k]), limit)
        return np.where(beyond[:, None], 0.0, update)

