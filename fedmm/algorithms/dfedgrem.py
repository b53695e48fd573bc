"""d-FedGrEM: FedGrEM without a server (``method="d-fedgrem"``; fedmm's own, no paper has it).

Every round each client runs FedGrEM's client side (FedGrEM Algorithm 1: the
E-step, ``w_hat = N_r / n_k``, one gradient step to ``theta_tilde_k``) and sends
its message to its neighbours on a communication graph (:mod:`fedmm.graphs`).
Then client ``k`` solves FedGrEM's robust central problem (Algorithm 1's
server step, :func:`fedmm.algorithms.central.central_update`) over its closed
neighbourhood ``N_k = {k} + neighbours``, as if those clients were the whole
federation::

    min over nu_j (j in N_k), nu_bar:  sum_{j in N_k} n_j / 2 ||theta_tilde_j - nu_j||^2
                                       + lambda_k sqrt(n_j) ||nu_j - nu_bar||,

and keeps its own ``nu_k`` (and its variances, pooled as FedGrEM pools them).
The penalty schedule is FedGrEM's with the neighbourhood's size in place of
``K`` (the paper's ``C sqrt(p + log K)`` increment) and its mean client size.

- On the complete graph every client solves the server's problem with the
  same inputs in the same order, so d-FedGrEM *is* FedGrEM, round by round
  (``tests/test_dfedgrem.py`` checks 1e-8).
- On a sparser graph a client pools only with its neighbours, and an outlier
  neighbour is left unpooled by each client's own group lasso, as FedGrEM's
  server leaves it: nothing but the neighbourhood's messages enters ``nu_k``.
  Information still travels further over the rounds: ``theta_tilde_j`` starts
  from ``nu_j``, which already holds ``j``'s neighbours, so the fixed point is
  a diffusion (adapt-then-combine, as in Sayed's diffusion strategies, 2014)
  whose combine step is the robust central update instead of an average.
"""

from typing import Callable, NamedTuple

import numpy as np

from .. import _params as P
from .. import graphs
from ..protocol import Broadcast, n_floats, stack, take
from .dfedem import DFedEM, mixing_schedule
from ._base import Strategy
from .fedgrem import Consensus, FedGrEM, deviation_norms, objective_scale, penalty_schedule, scale_deviation
from .variances import empty_components


class DFedGrEMState(NamedTuple):
    """The network between rounds: the model, the clients' sizes, the graph schedule ``t -> W`` (its support
    is the graph), and the last round's graph, per-client penalties and account (None before the first)."""

    family: object
    n_k: np.ndarray
    schedule: Callable
    W: np.ndarray | None = None
    lam: np.ndarray | None = None
    consensus: Consensus | None = None
    central_iterations: int = 0
    warned: bool = False
    lam_memory: list | None = None
    w0: np.ndarray | None = None


def neighbourhood(W, k):
    """Client ``k`` and its neighbours on the support of ``W``, in client order."""
    support = W[k] != 0
    support[k] = True
    return np.flatnonzero(support)


class DFedGrEM(FedGrEM):
    """d-FedGrEM (``method="d-fedgrem"``): each client solves FedGrEM's central problem over its neighbourhood.

    Parameters
    ----------
    graph : {"complete", "ring", "torus", "erdos-renyi"}, array-like of shape (K, K), or callable
        The communication graph, as for D-FedEM (:func:`fedmm.algorithms.dfedem.mixing_schedule`); only its
        support matters.
    C_eta, eta_rule, penalty, penalty_params, center_restarts, pool_variances
        As for :class:`~fedmm.algorithms.fedgrem.FedGrEM`, per neighbourhood. A client's restart from the
        consensus starts from its own neighbourhood's.
    pooling_sizes : {"client", "information"}, default="client"
        As for FedGrEM; the paper's ``n_k`` by default: information weights were measured to cost
        d-FedGrEM on the penguins (ARI 0.97 to 0.71, ``docs/fedgrem.md``, "Information weights in the
        centre"), where a neighbourhood's few clients decide its centre.
    central_tol, central_max_iter
        As for :class:`~fedmm.algorithms.fedgrem.FedGrEM`.
    random_state : int, RandomState or None
        Draws the random graph; None: a seed drawn from the estimator's ``random_state``.
    """

    name = "d-fedgrem"
    _parameter_constraints = {**{k: v for k, v in FedGrEM._parameter_constraints.items()
                                 if k not in ("participation", "dropout", "n_centers", "reweighting")},
                              "graph": DFedEM._parameter_constraints["graph"],
                              "random_state": P.random_state}
    client_server = False
    # A consensus per neighbourhood: every client's components count as its own (an upper bound, as local EM's).
    distinct_components = Strategy.distinct_components
    groups = Strategy.groups
    selection_criterion = Strategy.selection_criterion

    def __init__(self, graph="erdos-renyi", C_eta=1.0, eta_rule="safeguarded", penalty="sure-floored",
                 penalty_params=None, center_restarts=1, pooling_sizes="client", pool_variances=True,
                 central_tol=1e-10, central_max_iter=1000, random_state=None):
        super().__init__(C_eta=C_eta, eta_rule=eta_rule, penalty=penalty, penalty_params=penalty_params,
                         center_restarts=center_restarts, pooling_sizes=pooling_sizes, pool_variances=pool_variances,
                         central_tol=central_tol, central_max_iter=central_max_iter, n_centers=1)
        self.graph = graph
        self.random_state = random_state

    def server_start(self, family, start, n_k):
        schedule = mixing_schedule(self.graph, "metropolis-hastings", len(n_k), self.random_state)
        return Broadcast(start), DFedGrEMState(family, n_k, schedule, w0=start.weights)

    def server_step(self, messages, state, t):
        """Every client's central update over its neighbourhood's messages; each keeps its own row."""
        W, family, warned = state.schedule(t), state.family, state.warned
        p = messages.theta.shape[-1]
        q = family.log_scale(messages.scale[:1, :1], p).shape[-1]
        rows, accounts, lams, memories, iterations = [], [], [], [], 0
        for k in range(len(messages.n)):
            near = neighbourhood(W, k)
            K, n = len(near), messages.n[near].mean()
            scheduled = penalty_schedule(self.penalty, self.penalty_params, p, K, n)(t)
            lam = self._pilot(None if state.lam is None else state.lam[k], scheduled, t)
            lam_scale = penalty_schedule(self.penalty, self.penalty_params, q, K, n)(t)
            memory = (np.nan, np.nan, 0.0) if state.lam_memory is None else state.lam_memory[k]
            params, grouped, sigma, scale_pooled, own_scale, warned, lam, memory = self._pool(
                take(messages, near), family, lam, lam_scale, t, warned, scheduled, memory, state.w0[near], None)
            central = grouped.central
            memories.append(memory)
            i = np.searchsorted(near, k)
            empty = empty_components(messages.n[near], messages.weights[near])
            deviation = scale_deviation(family, own_scale, p, np.ones(len(near), bool), empty)
            rows.append(take(params, i))
            accounts.append(Consensus(central.center[None] * sigma, central.pooled[i:i + 1],
                                      central.distance[i:i + 1], central.threshold[i:i + 1],
                                      np.array([[lam * np.sqrt(messages.n[k])]]), scale_pooled[i:i + 1],
                                      np.array([[objective_scale(lam, scheduled)]]), np.array([k]),
                                      central.center[None] * sigma, central.distance[i:i + 1],
                                      deviation_norms(deviation[i:i + 1]), np.array([[q]])))
            lams.append(lam)
            iterations = max(iterations, central.n_iter)
        params = stack(rows)
        return Broadcast(params), state._replace(W=W, lam=np.array(lams), consensus=Consensus(*stack(accounts)),
                                                 central_iterations=iterations, warned=warned, lam_memory=memories)

    def communication(self, messages, broadcast, state):
        """One exchange: every client's FedGrEM message along each directed edge of the round's graph."""
        edges = graphs.n_directed_edges(state.W)
        return {"messages": edges, "floats": edges * n_floats(messages) // len(messages.n)}

    def round_info(self, state):
        return {"penalty": state.lam.mean(), "central_iterations": state.central_iterations,
                "pooled_fraction": state.consensus.pooled.mean()}

    def diagnostics(self, state):
        """Every client's :class:`~fedmm.algorithms.fedgrem.Consensus` row, its own neighbourhood's centre
        (``center`` of shape (K, R, p))."""
        return state.consensus

    def center(self, diagnostics):
        """None: each neighbourhood has its own consensus (``diagnostics.center[k]``)."""
        return None
