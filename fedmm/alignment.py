"""Permutation alignment of component labels across clients (FedGrEM App. C).

Local estimates are defined only up to a relabelling of their components, and
every method that pools estimates across clients needs the non-outlier
clients to share one labelling (App. C.1). A labelling is a permutation per
client: ``perms[k, r]`` is the component of client ``k`` that gets label
``r``, i.e. ``pi_k(r)`` in the paper, so ``theta[k, perms[k]]`` is aligned.

Methods (all return one permutation per client and the score, App. C.2):

- ``"exhaustive"``: the minimizer of the score over all ``(R!)^K`` labellings
  (Alignment Algorithm 1, Theorem C.2), by exact branch and bound;
- ``"stepwise"``: Alignment Algorithm 2 (Theorem C.4), clients in a given order;
- ``"greedy"``: stepwise over ``B`` random client orders, best score kept (what
  the authors' scripts run, B = 50);
- ``"consensus"``: fedmm's polynomial method: Hungarian matching of every
  client to a robust reference (medoid, then coordinate-wise median),
  iterated to a fixed point. It needs neither non-outliers first nor ``R!``.
"""

import itertools
from dataclasses import dataclass, field
from functools import cached_property
from math import factorial

import numpy as np
from numba import prange
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import pdist
from sklearn.utils import check_random_state

from ._assumptions import AssumptionCheck, Condition
from .threads import parallel_kernel
from .robust import client_median

__all__ = ["ALIGNMENT_METHODS", "Alignment", "align", "score", "check_assumptions", "bottleneck"]

ALIGNMENT_METHODS = ("consensus", "stepwise", "greedy", "exhaustive")


@dataclass(frozen=True, eq=False)
class Alignment:
    """Result of an alignment.

    Attributes
    ----------
    perms : ndarray of shape (K, R)
        ``theta[k, perms[k]]`` is client ``k``'s estimate in the common labelling.
    method : str
    theta : ndarray of shape (K, R, p)
        The estimates that were aligned (a fitted estimator's ``alignment_``: in its internal standard
        units, :mod:`fedmm.units`, so ``score`` is in those units too).
    score : float
        ``score(theta, perms)`` (App. C.2); smaller is better aligned. Computed when first read: it sums
        over all pairs of clients, ``O(K^2)`` (0.7 s at K = 10,000), which a fit does not need.
    """

    perms: np.ndarray
    method: str
    theta: np.ndarray = field(repr=False)

    @cached_property
    def score(self):
        return score(self.theta, self.perms)


def score(theta, perms):
    """``score(pi, K) = sum_r sum_{k != k'} ||theta^(k)_{pi_k(r)} - theta^(k')_{pi_k'(r)}||_2`` (App. C.2).

    Parameters
    ----------
    theta : ndarray of shape (K, R, p)
    perms : ndarray of shape (K, R)
    """
    aligned = theta[np.arange(len(theta))[:, None], perms]
    # pdist counts each unordered pair once; the paper's sum is over ordered pairs.
    return float(sum(2.0 * pdist(aligned[:, r]).sum() for r in range(aligned.shape[1])))


def align(theta, method="consensus", *, order=None, n_orders=50, max_candidates=10 ** 8, random_state=None):
    """Find one permutation per client that aligns their component labels.

    Parameters
    ----------
    theta : ndarray of shape (K, R, p)
        Per-client component parameters (GMM means or regression coefficients).
    method : {"consensus", "stepwise", "greedy", "exhaustive"}
    order : sequence of int, optional
        Client order for ``"stepwise"`` (default: 0, 1, ..., K-1).
    n_orders : int
        Number of random orders ``B`` for ``"greedy"``.
    max_candidates : int
        ``"exhaustive"`` refuses when the worst case, ``(R!)^(K-1)`` labellings
        (client 0's labels fixed without loss), exceeds this.
    random_state : int, RandomState instance or None
        For ``"greedy"`` orders and ``"consensus"`` reference candidates (when K > 64).

    Returns
    -------
    Alignment
    """
    theta = np.asarray(theta, dtype=float)
    if theta.ndim != 3:
        raise ValueError(f"theta must have shape (K, R, p), got {theta.shape}.")
    K, R, _ = theta.shape
    if method == "stepwise":
        perms = _stepwise(theta, np.arange(K) if order is None else np.asarray(order))
    elif method == "greedy":
        rng = check_random_state(random_state)
        candidates = [_stepwise(theta, rng.permutation(K)) for _ in range(n_orders)]
        perms = min(candidates, key=lambda p: score(theta, p))
    elif method == "consensus":
        perms = _consensus(theta, check_random_state(random_state))
    elif method == "exhaustive":
        perms = _exhaustive(theta, max_candidates)
    else:
        raise ValueError(f"Unknown alignment method {method!r}; choose one of {ALIGNMENT_METHODS}.")
    return Alignment(perms, method, theta)


def _cost(a, b):
    """``cost[r, s] = ||a_r - b_s||``: the price of giving ``b``'s component ``s`` the label ``r``."""
    return np.linalg.norm(a[:, None, :] - b[None, :, :], axis=-1)


def _match(reference_cost):
    """The permutation minimizing ``sum_r cost[r, pi(r)]`` (Hungarian algorithm)."""
    return linear_sum_assignment(reference_cost)[1]


def match_each(reference, theta):
    """Each client's optimal labelling of ``theta[k]`` (K, R, p) against its own ``reference[k]``: the
    permutation ``pi`` minimizing ``sum_r ||reference_kr - theta[k, pi(r)]||`` (K, R).

    The identity wherever each ``reference_kr`` is nearest ``theta_kr`` (the sum of the rows' minima bounds
    every labelling's total from below), the Hungarian algorithm for the other clients.
    """
    cost = np.linalg.norm(reference[:, :, None, :] - theta[:, None, :, :], axis=-1)    # (K, R, R)
    R = cost.shape[1]
    perms = np.tile(np.arange(R), (len(cost), 1))
    for k in np.flatnonzero((cost.argmin(axis=2) != np.arange(R)).any(axis=1)):
        perms[k] = _match(cost[k])
    return perms


def _stepwise(theta, order):
    """Alignment Algorithm 2: each client in turn takes the labelling closest to those already fixed.

    Client ``k``'s step minimizes ``sum_r sum_{k' fixed} ||theta^(k)_{pi(r)} - theta^(k')_{pi_k'(r)}||``
    over ``pi``. That is a linear assignment problem in ``pi``, so the Hungarian
    algorithm finds the same minimizer as the paper's enumeration of ``R!``
    labellings, in ``O(R^3)``.
    """
    K, R, _ = theta.shape
    perms = np.empty((K, R), dtype=np.intp)
    perms[order[0]] = np.arange(R)
    fixed = [theta[order[0]]]
    for k in order[1:]:
        cost = sum(_cost(ref, theta[k]) for ref in fixed)
        perms[k] = _match(cost)
        fixed.append(theta[k, perms[k]])
    return perms


def _consensus(theta, rng, max_rounds=50, n_reference_candidates=64, n_medoid_sample=1000):
    """fedmm's polynomial alignment: match every client to a robust reference, to a fixed point.

    1. Reference: the medoid client, the one with the smallest total optimal
       matching cost to all clients (candidates: all clients, or 64 drawn at
       random when K > 64; the totals over all clients, or over 1,000 drawn
       at random when K > 1,000, a sample whose totals rank the candidates
       as the full sums do up to noise of a few per cent). An outlier is far
       from every inlier, so while outliers are a minority the medoid is an
       inlier, wherever it stands in the client order.
    2. Match every client to the reference (:func:`_match_to`: its exact optimal matching).
    3. New reference: the coordinate-wise median of the aligned clients (robust
       to a minority of outliers); repeat 2-3 until no label changes.

    Cost: ``O(min(K, 64) min(K, 1000) R^3)`` for the medoid, ``O(K R^3)`` per round.
    """
    K, R, _ = theta.shape
    candidates = np.arange(K) if K <= n_reference_candidates else rng.choice(K, n_reference_candidates, False)
    sample = theta if K <= n_medoid_sample else theta[np.sort(rng.choice(K, n_medoid_sample, False))]
    totals = [_match_to(theta[c], sample)[1].sum() for c in candidates]
    reference = theta[candidates[int(np.argmin(totals))]]
    perms = None
    for _ in range(max_rounds):
        new = _match_to(reference, theta)[0]
        if perms is not None and np.array_equal(new, perms):
            break
        perms = new
        reference = client_median(theta[np.arange(K)[:, None], perms])
    return perms


def _matching_cost(a, b):
    cost = _cost(a, b)
    rows, cols = linear_sum_assignment(cost)
    return cost[rows, cols].sum()


#: Components up to which a batch of matchings tries every permutation (120 at R = 5).
BRUTE_FORCE_MAX = 5


def _match_to(reference, theta):
    """Every client's optimal labelling against ``reference`` (R, p): the permutation minimizing
    ``sum_r ||reference_r - theta[k, pi(r)]||`` (K, R) and its total (K,).

    For small ``R`` one compiled pass tries every permutation of every client (:func:`_brute_force`; at
    K = 10,000 a consensus alignment took 3.7 s in numpy, one call per medoid candidate and round), else
    the Hungarian algorithm client by client. Both give each client's exact optimum.
    """
    K, R, _ = theta.shape
    if R <= BRUTE_FORCE_MAX:
        candidates = np.array(list(itertools.permutations(range(R))), dtype=np.intp)   # (R!, R)
        work = K * len(candidates) * R  # the candidates' totals; the cost matrices are R times fewer terms
        return _brute_force(work, K, np.ascontiguousarray(reference, dtype=float),
                            np.ascontiguousarray(theta, dtype=float), candidates)
    costs = [_cost(reference, t) for t in theta]
    perms = np.array([_match(c) for c in costs]).reshape(K, R)
    return perms, np.array([c[np.arange(R), q].sum() for c, q in zip(costs, perms)])


@parallel_kernel()
def _brute_force(reference, theta, candidates):
    """:func:`_match_to` for small ``R``: each client's cost matrix ``||reference_r - theta[k, s]||``, then
    the cheapest of ``candidates`` (every permutation; the first on a tie)."""
    K, R, p = theta.shape
    perms = np.empty((K, R), dtype=np.intp)
    totals = np.empty(K)
    for k in prange(K):
        cost = np.empty((R, R))
        for r in range(R):
            for s in range(R):
                squares = 0.0
                for j in range(p):
                    squares += (reference[r, j] - theta[k, s, j]) ** 2
                cost[r, s] = np.sqrt(squares)
        best, best_total = 0, np.inf
        for c in range(candidates.shape[0]):
            total = 0.0
            for r in range(R):
                total += cost[r, candidates[c, r]]
            if total < best_total:
                best, best_total = c, total
        for r in range(R):  # a loop: Numba's checked row assignment takes seconds to compile
            perms[k, r] = candidates[best, r]
        totals[k] = best_total
    return perms, totals


def _sci(n):
    """An integer of any size in 3-digit scientific notation (floats overflow past 1e308)."""
    digits = str(int(n))
    return f"{int(digits[:3].ljust(3, '0')) / 100:.2f}e+{len(digits) - 1:02d}"


def _exhaustive(theta, max_candidates):
    """Alignment Algorithm 1: the exact minimizer of the score over all labellings.

    The score does not change when every client is relabelled the same way, so
    client 0 keeps its labels and the search runs over the other ``K - 1``
    clients' ``R!`` labellings each, depth first, cutting a branch as soon as
    its partial score plus a lower bound on the rest reaches the best complete
    score so far (started from the consensus alignment). Lower bounds: each
    pair of unlabelled clients costs at least its optimal matching cost, and
    each unlabelled client at least its best cost against the labelled ones.
    The answer is the exhaustive minimizer; pruning only skips labellings
    that provably cannot beat it.
    """
    K, R, _ = theta.shape
    worst = factorial(R) ** (K - 1)
    if worst > max_candidates:
        raise ValueError(
            f"Exhaustive alignment of K={K} clients with R={R} components may score up to "
            f"(R!)^(K-1) = {factorial(R)}^{K - 1} = {_sci(worst)} labellings, over max_candidates="
            f"{_sci(max_candidates)}. Use alignment='consensus' (polynomial, robust to outliers in any "
            "position) or 'greedy', or raise max_candidates.")
    P = np.array(list(itertools.permutations(range(R))))        # (R!, R)
    D = {(j, i): _cost(theta[i], theta[j]) for j in range(K) for i in range(j)}  # D[j, i][r, s]

    def pair_costs(j, i, b):
        """Cost of every labelling of client j against client i labelled by P[b] (both orders of the pair)."""
        return 2.0 * D[j, i][P[b][None, :], P].sum(axis=1)

    pair_floor = {(j, i): 2.0 * _matching_cost(theta[i], theta[j]) for (j, i) in D}
    best = _consensus(theta, np.random.RandomState(0))
    best_score = [score(theta, best), None]
    labels = np.zeros(K, dtype=np.intp)                         # index into P; client 0 = identity

    def search(j, partial):
        if j == K:
            if partial < best_score[0]:
                best_score[:] = [partial, labels.copy()]
            return
        inc = sum(pair_costs(j, i, labels[i]) for i in range(j))
        rest = sum(pair_floor[(b, a)] for a in range(j + 1, K) for b in range(a + 1, K))
        rest += sum(min(sum(pair_costs(m, i, labels[i]) for i in range(j))) for m in range(j + 1, K))
        for a in np.argsort(inc, kind="stable"):
            if partial + inc[a] + rest >= best_score[0] - 1e-12:
                break
            labels[j] = a
            search(j + 1, partial + inc[a])

    search(1, 0.0)
    if best_score[1] is None:  # the starting alignment was already optimal
        return best
    return P[best_score[1]]


# --- Assumptions C.1 and C.3, given the truth ------------------------------------------

def check_assumptions(theta_init, theta_true, outliers=None, h=None, order=None):
    """Check Assumptions C.1 (exhaustive search) and C.3 (stepwise search) of App. C.2.

    Parameters
    ----------
    theta_init : ndarray of shape (K, R, p)
        The per-client estimates to be aligned (any labelling).
    theta_true : ndarray of shape (K, R, p)
        The true parameters (outlier clients' entries are ignored).
    outliers : array-like of bool, shape (K,), optional
        The outlier clients ``S^c``.
    h : float, optional
        Similarity level; by default computed from the truth as the largest
        over components of the radius of the smallest ball holding every
        non-outlier client's parameter (Sec. 2.1's definition of ``h``).
    order : sequence of int, optional
        Client order of stepwise search; ``K0`` is the number of non-outliers
        it starts with.

    Returns
    -------
    dict
        ``{"C.1": AssumptionCheck, "C.3": AssumptionCheck}``; ``str()`` of
        each prints the numbers.
    """
    theta_init, theta_true = np.asarray(theta_init, float), np.asarray(theta_true, float)
    K, R, _ = theta_true.shape
    outliers = np.zeros(K, bool) if outliers is None else np.asarray(outliers, bool)
    S = np.flatnonzero(~outliers)
    eps = outliers.mean()
    delta = min(pdist(theta_true[k]).min() for k in S)
    if h is None:
        h = max(_enclosing_radius(theta_true[S, r]) for r in range(R))
    e0 = max(bottleneck(_cost(theta_true[k], theta_init[k])) for k in S)
    order = np.arange(K) if order is None else np.asarray(order)
    K0 = int(np.argmax(outliers[order])) if outliers.any() else K

    a, b = (2 + 2 * eps) / (1 - eps) if eps < 1 else np.inf, (4 + 4 * eps) / (1 - eps) if eps < 1 else np.inf
    c1 = AssumptionCheck("C.1", [
        Condition("i", "Delta > (2+2eps)/(1-eps) h + (4+4eps)/(1-eps) e0", delta, a * h + b * e0,
                  delta > a * h + b * e0),
        Condition("ii", "eps < 1/2", eps, 0.5, eps < 0.5)],
        {"Delta": delta, "h": h, "e0": e0, "eps": eps})
    ratio = (K0 + K * eps) / (K0 - K * eps) if K0 > K * eps else np.inf
    c3 = AssumptionCheck("C.3", [
        Condition("i", "Delta > 2 (K0+K eps)/(K0-K eps) h + 6 (K0+K eps)/(K0-K eps) e0", delta,
                  2 * ratio * h + 6 * ratio * e0, delta > 2 * ratio * h + 6 * ratio * e0),
        Condition("ii", "K0 > K eps", K0, K * eps, K0 > K * eps),
        Condition("iii", "eps < 1/2", eps, 0.5, eps < 0.5)],
        {"Delta": delta, "h": h, "e0": e0, "eps": eps, "K0": K0})
    return {"C.1": c1, "C.3": c3}


def bottleneck(cost):
    """``min_pi max_r cost[r, pi(r)]``: the smallest threshold admitting a perfect matching."""
    values = np.unique(cost)
    lo, hi = 0, len(values) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        blocked = (cost > values[mid]).astype(float)
        rows, cols = linear_sum_assignment(blocked)
        if blocked[rows, cols].sum() == 0:
            hi = mid
        else:
            lo = mid + 1
    return float(values[lo])


def _enclosing_radius(points):
    """Radius of the smallest ball containing ``points`` (m, p): ``min_c max_k ||x_k - c||``."""
    from scipy.optimize import minimize

    if len(points) == 1:
        return 0.0
    c0 = points.mean(axis=0)
    t0 = ((points - c0) ** 2).sum(axis=1).max()
    # Variables (c, t) with t the squared radius: minimize t s.t. t >= ||x_k - c||^2 (convex, smooth).
    res = minimize(lambda v: v[-1], np.append(c0, t0), method="SLSQP",
                   constraints={"type": "ineq", "fun": lambda v: v[-1] - ((points - v[:-1]) ** 2).sum(axis=1),
                                "jac": lambda v: np.column_stack([2 * (points - v[:-1]), np.ones(len(points))])},
                   jac=lambda v: np.eye(len(v))[-1], options={"ftol": 1e-12, "maxiter": 500})
    return float(np.sqrt(max(((points - res.x[:-1]) ** 2).sum(axis=1).max(), 0.0)))
