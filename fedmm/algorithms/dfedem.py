"""D-FedEM (Marfoq et al., NeurIPS 2021, App. D.2, Alg. 4): FedEM without a server.

Every round each client runs the E-step and its local M-step (as in FedEM),
then, instead of the server's average, mixes its component parameters with its
neighbours' over a communication graph (:mod:`fedmm.graphs`), ``n_gossip``
times: ``theta_k <- sum_j W_kj theta_j`` (Alg. 4, line 18) with ``W``
symmetric and doubly stochastic on the graph (Assumption 9). Alg. 4's local
solver scales client ``t``'s steps by ``n_t / n``, i.e. the consensus it
reaches weights clients by their sizes, as the paper's FedEM server does
(``FedEM(aggregation="samples")``; fedmm's FedEM weights by ``n_k w_kr`` by default); with the
closed-form local M-step fedmm reaches the same weighting by gossiping sizes
alongside parameters (ratio consensus): client ``k`` keeps
``sum_j W_kj n_j theta_j / sum_j W_kj n_j`` (and after further exchanges the
ratio of the mixed numerators and denominators). On the complete graph with
Metropolis-Hastings weights (``W = 1 1^T / K``) one exchange is that
average exactly. Variances are mixed the same way; mixing proportions stay
local.

In the engine the exchange is the server step, but it only applies ``W``: what
client ``k`` gets is a combination of its neighbours' messages and nothing else
(``tests/test_dfedem.py`` checks that a client's result does not change when a
non-neighbour's message does).
"""

from typing import Callable, NamedTuple

import numpy as np
from sklearn.utils import check_random_state

from .. import graphs
from ..families import MixtureParams
from ..protocol import Broadcast
from .. import _params as P
from ._base import Strategy, em_update

GRAPHS = ("complete", "ring", "torus", "erdos-renyi")
MIXINGS = ("fastest", "metropolis-hastings")


def mixing_schedule(graph, mixing, K, random_state):
    """``t -> W``: the mixing matrix of round ``t`` for ``graph`` (a name of :data:`GRAPHS`, an adjacency
    matrix, or a callable ``t -> W`` already) on ``K`` clients, checked doubly stochastic. "torus" is the
    squarest ``rows x cols = K`` grid (a ring when ``K`` is prime)."""
    if callable(graph):
        return lambda t: graphs.check_mixing(graph(t))
    mix = {"fastest": graphs.fastest_mixing, "metropolis-hastings": graphs.metropolis_hastings}[mixing]
    if isinstance(graph, str):
        if graph == "torus":
            rows = max(r for r in range(1, int(np.sqrt(K)) + 1) if K % r == 0)
            A = graphs.torus(rows, K // rows)
        elif graph == "erdos-renyi":  # the FedEM paper's D-FedEM experiments: p = 0.5 (App. J.1)
            A = graphs.connected_erdos_renyi(K, 0.5, check_random_state(random_state))
        else:
            A = {"complete": graphs.complete, "ring": graphs.ring}[graph](K)
    else:
        A = graphs.adjacency(graph)
        if len(A) != K:
            raise ValueError(f"The graph has {len(A)} nodes but there are {K} clients.")
    W = mix(A)
    return lambda t: W


class GossipState(NamedTuple):
    """The network between rounds: the mixing schedule and the last round's ``W``."""

    schedule: Callable
    W: np.ndarray | None = None


class DFedEM(Strategy):
    """D-FedEM (``method="d-fedem"``): local M-steps, then gossip over a graph.

    Parameters
    ----------
    graph : {"complete", "ring", "torus", "erdos-renyi"}, array-like of shape (K, K), or callable
        The communication graph (:mod:`fedmm.graphs`): a name, an adjacency
        matrix, or a time-varying ``t -> W``. "erdos-renyi" draws an
        Erdos-Renyi(K, 0.5) graph from ``random_state``, as the FedEM paper did,
        redrawing until it is connected.
    mixing : {"fastest", "metropolis-hastings"}
        The mixing matrix on the graph (the paper: fastest mixing).
    n_gossip : int
        Exchanges per round.
    random_state : int, RandomState or None
        Draws the random graph; None: a seed drawn from the estimator's ``random_state``.
    """

    name = "d-fedem"
    _parameter_constraints = {
        "graph": P.any_of(P.one_of(*GRAPHS), P.instance(list, tuple, np.ndarray, text="an adjacency matrix"),
                          P.function),
        "mixing": P.one_of(*MIXINGS), "n_gossip": P.integer(1), "random_state": P.random_state}
    per_client = False
    default_init = "common"
    ascent = False
    client_server = False

    def __init__(self, graph="erdos-renyi", mixing="fastest", n_gossip=1, random_state=None):
        self.graph = graph
        self.mixing = mixing
        self.n_gossip = n_gossip
        self.random_state = random_state

    def local_update(self, family, stats, state, n_k):
        return em_update(family, stats, n_k)

    def server_start(self, family, start, n_k):
        return Broadcast(start), GossipState(mixing_schedule(self.graph, self.mixing, len(n_k), self.random_state))

    def server_step(self, messages, state, t):
        """``n_gossip`` exchanges of ``(n_k theta_k, n_k)`` with the neighbours; each client keeps the ratio."""
        W = state.schedule(t)
        size = messages.n.astype(float)[:, None, None]
        theta, scale, weight = size * messages.theta, size * messages.scale, size
        for _ in range(self.n_gossip):
            theta, scale, weight = (np.einsum("kj,j...->k...", W, a) for a in (theta, scale, weight))
        return Broadcast(MixtureParams(messages.weights, theta / weight, scale / weight)), state._replace(W=W)

    def communication(self, messages, broadcast, state):
        """Each exchange sends every client's ``(n_k theta_k, n_k scale_k, n_k)`` along each directed edge of
        the round's graph (the off-diagonal support of ``W``)."""
        edges = graphs.n_directed_edges(state.W)
        per_message = messages.theta[0].size + messages.scale[0].size + 1
        return {"messages": self.n_gossip * edges, "floats": self.n_gossip * edges * per_message}
