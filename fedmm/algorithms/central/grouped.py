"""FedGrEM's central problem with several centres, the clients assigned to them (fedmm's, beyond the paper;
``FedGrEM(n_centers=...)``): the single-centre problem of :mod:`fedmm.algorithms.central.single` in each group."""

from typing import NamedTuple

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.stats import norm

from .single import CentralResult, _norm, _per_block, central_update


class GroupedResult(NamedTuple):
    """The central problem with several centres (:func:`grouped_central_update`).

    Attributes
    ----------
    central : CentralResult
        The solution, its ``center`` of shape (K, R, p): each client's own group's centre.
    labels : ndarray of shape (K,), int
        Each client's group, ``0`` the largest.
    centers : ndarray of shape (G, R, p)
        The groups' centres.
    main_distance : ndarray of shape (K, R)
        ``||theta_kr - nu_bar_0r||``: every client's distance to the largest group's centre.
    """

    central: CentralResult
    labels: np.ndarray
    centers: np.ndarray
    main_distance: np.ndarray


def huber_costs(theta, centers, threshold, weights, metric=None):
    """``c_kg = sum_r omega_kr H(||theta_kr - nu_bar_gr||; lambda / sqrt(n_kr))`` (K, G): client ``k``'s term of
    the central objective with ``nu_k`` profiled out, were its centre group ``g``'s.

    ``H(u; t) = u^2 / 2`` up to ``t`` and ``t u - t^2 / 2`` beyond (:mod:`fedmm.algorithms.central.single`'s Huber
    loss, per unit weight): the cost of the clients' assignment step in :func:`grouped_central_update`.

    :data:`CHUNK` clients at a time, the same numbers: their (clients, G, R, p) differences stay in cache (at
    K = 10^5 the whole array's were 80 MB a centre, and half of a fit's time).
    """
    cost = np.empty((len(theta), len(centers)))
    for start in range(0, len(theta), CHUNK):
        k = slice(start, start + CHUNK)
        cost[k] = _huber_sum(_norm(theta[k, None] - centers[None], None if metric is None else metric[k, None]),
                             threshold[k, None], weights[k, None])
    return cost


#: Clients per block of :func:`huber_costs`.
CHUNK = 2048


def _huber_sum(u, t, omega):
    """``sum_r omega_r H(u_r; t_r)`` over the last axis (see :func:`huber_costs`); an empty block costs nothing."""
    with np.errstate(invalid="ignore", over="ignore"):
        h = np.where(u <= t, 0.5 * u * u, t * u - 0.5 * t * t)
    return np.where(omega > 0, omega * h, 0.0).sum(axis=-1)


def _distances_to(theta, clients, candidates, metric=None):
    """``||theta_kr - theta_cr||`` (K', C, R) from the ``clients`` to the ``candidates``, in the metric of client
    ``k`` if given; without one through ``||a||^2 + ||b||^2 - 2 a.b``, a matrix product per component."""
    if metric is not None:
        return _norm(theta[clients][:, None] - theta[candidates][None], metric[clients][:, None])
    a, b = theta[clients], theta[candidates]
    d2 = np.stack([np.einsum("kp,kp->k", a[:, r], a[:, r])[:, None] + np.einsum("cp,cp->c", b[:, r], b[:, r])
                   - 2.0 * a[:, r] @ b[:, r].T for r in range(theta.shape[1])], axis=-1)
    return np.sqrt(np.maximum(d2, 0.0))


def grouped_central_update(theta, n_k, lam, labels, *, centre_cost, min_clients=2, max_groups=None, weights=None,
                           metric=None, tol=1e-10, max_iter=1000, max_rounds=50):
    """FedGrEM's central problem with several centres, the clients assigned to them (fedmm's, beyond the paper).

    Clustered federated learning (IFCA: Ghosh et al., 2020) with FedGrEM's robust central problem in each
    group: for ``G`` groups,

        min_{g, nu, nu_bar_1..nu_bar_G}  sum_k  n_k/2 ||nu_k - theta_k||^2 + sqrt(n_k) lambda ||nu_k - nu_bar_g(k)||
                                             + G * centre_cost,

    solved by alternating the groups' central problems (:func:`central_update` on each group's clients) and
    the assignment of every client to the centre of least Huber cost (:func:`huber_costs`): neither step
    raises the objective. ``G`` is chosen greedily from ``labels``: a centre is added at the client whose
    estimate would save the others most, and the smallest group's centre removed, while either lowers the
    objective plus ``G * centre_cost`` without adding a group that has fewer than ``min_clients`` clients
    pooled onto its centre (:func:`_unsupported`): clients far from the others and from each other (outliers)
    stay unpooled in their nearest group rather than get a centre of their own. With ``G = 1`` this is
    :func:`central_update`.

    Parameters
    ----------
    theta, n_k, lam, weights, metric, tol, max_iter
        As in :func:`central_update`.
    labels : ndarray of shape (K,), int, or None
        The groups to start from (last round's); None: one group.
    centre_cost : float
        The cost of a centre in the objective's units; ``inf`` keeps the groups of ``labels``.
    min_clients : int
        The fewest clients a group holds, and the fewest pooled onto a centre a step adds.
    max_groups : int, optional
        The most groups; ``K // min_clients`` by default.
    max_rounds : int
        Cap on the alternations for one ``G``.

    Returns
    -------
    GroupedResult
    """
    theta = np.asarray(theta, dtype=float)
    K = len(theta)
    sizes = _per_block(n_k, theta)
    omega = sizes if weights is None else _per_block(weights, theta)
    with np.errstate(divide="ignore"):
        threshold = lam / np.sqrt(sizes)
    max_groups = K // min_clients if max_groups is None else max_groups
    solve = dict(weights=weights, metric=metric, tol=tol, max_iter=max_iter)

    def solved(labels):
        """Alternate solving and assigning from ``labels`` until no client moves: (labels, parts, centres, cost).

        A round is a function of its labels alone, so labels seen before start a cycle, and the round the cap
        ends on is the cycle's member it lands on (:func:`_last_of_cycle`): solved once, not for the rounds left
        (at K = 10^5, trials cycled through all ``max_rounds`` of a round's central problem)."""
        seen = []
        for rounds_left in range(max_rounds - 1, -1, -1):
            labels = numbered_by_size(labels)
            last = _last_of_cycle(seen, labels, rounds_left)
            labels, rounds_left = (labels, rounds_left) if last is None else (last, 0)
            seen.append(labels)
            parts = [_part_update(theta, n_k, lam, labels == g, solve) for g in range(labels.max() + 1)]
            centers = np.stack([part.center for part in parts])
            cost = huber_costs(theta, centers, threshold, omega, metric)
            new = _assigned(cost, labels, min_clients)
            if (new == labels).all() or not rounds_left:
                break
            labels = new
        return labels, parts, centers, cost

    def value(state):
        labels, _, centers, cost = state
        return cost[np.arange(K), labels].sum() + len(centers) * centre_cost

    best = solved(np.zeros(K, dtype=int) if labels is None else np.asarray(labels))
    while np.isfinite(centre_cost):
        twice = _population_twice(best, theta)
        if twice is not None:   # whatever the split saves (see _population_twice)
            best = solved(np.where(best[0] == twice[0], twice[1], best[0]))
            continue
        trials = []
        if best[2].shape[0] < max_groups:
            trials.append(_with_centre(best, theta, threshold, omega, metric, min_clients))
        if best[2].shape[0] > 1:
            trials.append(_without_smallest(best))
        trials = [solved(t) for t in trials if t is not None]
        unsupported = _unsupported(best, min_clients)
        better = [t for t in trials if value(t) < value(best) and _unsupported(t, min_clients) <= unsupported
                  and _population_twice(t, theta) is None]
        if not better:
            break
        best = min(better, key=value)
    labels, parts, centers, _ = best
    central = _joined(parts, labels, theta)
    main = central.distance.copy() if len(parts) == 1 else \
        np.where(labels[:, None] == 0, central.distance, _norm(theta - centers[0], metric))
    return GroupedResult(central, labels, centers, main)


def _last_of_cycle(seen, labels, rounds_left):
    """The labels the alternation's last round has, when ``labels`` repeat an earlier round's of ``seen`` (None
    otherwise): the rounds from that one repeat with its period, ``rounds_left`` more after this one."""
    start = next((i for i, earlier in enumerate(seen) if np.array_equal(earlier, labels)), None)
    if start is None:
        return None
    return seen[start + (len(seen) - start + rounds_left) % (len(seen) - start)]


def _unsupported(state, min_clients):
    """How many groups have fewer than ``min_clients`` clients pooled onto their centre (at least half of their
    components). Clients far from every centre, and from each other (outliers), are nearer a centre put among
    them than the others' and would lower the objective by it, but pool onto none: a step may not add such a
    group. (A step may leave one, as a first centre between two groups is until the second gets its own.)"""
    return sum(_pooling(part) < min_clients for part in state[1])


def _pooling(part):
    """How many of a group's clients are pooled onto its centre (:func:`_pooled_clients`)."""
    return int(_pooled_clients(part).sum())


def _pooled_clients(part):
    """(members,) bool: the group's clients pooled onto its centre on at least half of their components."""
    return part.pooled.mean(axis=1) >= 0.5


def _part_update(theta, n_k, lam, members, solve):
    """:func:`central_update` of the clients ``members`` (all of them: the arrays as they are, no copy)."""
    members = slice(None) if members.all() else members
    take = lambda a: None if a is None else np.asarray(a).reshape(len(theta), -1)[members]  # noqa: E731
    metric = solve["metric"]
    return central_update(theta[members], take(n_k), lam, weights=take(solve["weights"]),
                          metric=None if metric is None else metric[members], tol=solve["tol"],
                          max_iter=solve["max_iter"])


def numbered_by_size(labels):
    """Groups numbered ``0, 1, ...`` by decreasing size (ties by first client): group 0 is the largest."""
    groups, first, counts = np.unique(labels, return_index=True, return_counts=True)
    order = np.lexsort((first, -counts))
    rank = np.empty(len(groups), dtype=int)
    rank[order] = np.arange(len(groups))
    return rank[np.searchsorted(groups, labels)]


def _assigned(cost, labels, min_clients):
    """Every client to its cheapest centre, a group left with fewer than ``min_clients`` dissolved into the
    others (its clients to their next cheapest)."""
    cost = cost.copy()
    while True:
        new = cost.argmin(axis=1)
        counts = np.bincount(new, minlength=cost.shape[1])
        small = np.flatnonzero((counts > 0) & (counts < min_clients))
        if small.size == 0 or cost.shape[1] - np.isinf(cost[0]).sum() <= 1:
            return new
        cost[:, small[np.argmin(counts[small])]] = np.inf


def _with_centre(state, theta, threshold, omega, metric, min_clients, n_candidates=32, n_served=256):
    """The labels with a new group around the client whose estimate, as a centre, saves the clients it gathers
    most, or None if no candidate gathers ``min_clients``. The candidates are the ``n_candidates`` clients the
    centres serve worst, the clients they may gather the ``n_served`` worst (a group the centres miss is served
    worst; the alternation that follows brings in the rest): at K = 10,000 every client against every
    candidate cost 150 ms a round."""
    labels, parts, centers, cost = state
    own = cost[np.arange(len(theta)), labels]
    worst = np.argsort(-own, kind="stable")[:n_served]
    candidates = worst[:n_candidates]
    populations = centers[[_pooling(part) >= min_clients for part in parts]]
    near = _distances_to(theta, worst, candidates, metric)                                  # (M, C, R)
    trial = _huber_sum(near, threshold[worst, None], omega[worst, None])                     # (M, C)
    # A client gathers round a candidate where it gains and would pool there: at least half of its components
    # within twice their threshold of the candidate's (the candidate's own noise doubles the distance).
    gain = own[worst, None] - trial
    gathered = (gain > 0) & ((near <= 2.0 * threshold[worst, None]).mean(axis=-1) >= 0.5)
    saving = np.where(gathered.sum(axis=0) >= min_clients, np.where(gathered, gain, 0.0).sum(axis=0), 0.0)
    for best in np.argsort(-saving, kind="stable")[:np.count_nonzero(saving > 0)]:
        c = candidates[best]
        if not _relabels(theta[c], populations, 2.0 * threshold[c], None if metric is None else metric[c]):
            new = labels.copy()
            new[worst[gathered[:, best]]] = labels.max() + 1
            return new
    return None


def _relabels(estimate, centers, reach, metric=None):
    """Whether a client's ``estimate`` (R, p) is one of ``centers`` (those that pool a group) in another labelling
    or in a poor local optimum, rather than a group of its own: distances within ``reach`` (R,) count as equal,
    in the client's ``metric`` (R, p, p) if given. Under the best matching with a centre, the estimate is

    - another labelling where every component matches;
    - a poor optimum where some components match and the others hold a split: two of its components within
      ``reach`` of each other, or within twice ``reach`` of one of the centre's components (a fitted mixture's
      components are distinct; the halves of a split component lie about a threshold beyond the centre's).

    Label alignment leaves some clients so; they are the same population, and a centre of their own splits it
    by labelling or holds them in the optimum (3,000 clients of 50 samples from one mixture, local-EM start: 21
    groups with no matching, 80 clients held in a poor optimum for 500 rounds when half the components had to
    match). Groups may share components: some match and the others are apart from everything (two groups of
    six that share two of three components had one centre when any match refused a group: 1.5x the oracle,
    ``validation/every_client.py``)."""
    within = reach[:, None]
    split = (_norm(estimate[:, None] - estimate[None], None if metric is None else metric[:, None]) <= within)
    split = (split & ~np.eye(len(estimate), dtype=bool)).any()
    for center in centers:
        d = _norm(estimate[:, None] - center[None], None if metric is None else metric[:, None])  # (R, R)
        rows, cols = linear_sum_assignment(d)
        matched = d[rows, cols] <= reach[rows]
        if matched.all() or (matched.any() and (split or ((d <= 2.0 * within).sum(axis=0) > 1).any())):
            return True
    return False


def _population_twice(state, theta):
    """Two groups ``(g, h)``, ``g > h``, that split one population, or None.

    Assigning clients to the cheaper of two centres is 2-means, which splits one homogeneous population too:
    the best split of ``K`` normal points lowers their sum of squares along the split's direction by ``2 / pi``
    of it (Hartigan, *Ann. Stat.* 1978), a gain that grows with ``K`` while a centre's cost
    (:func:`fedmm.algorithms.fedgrem.centre_cost`) grows with ``log n``: 10^5 clients of one mixture were held in
    two halves of 50,000. A split of normal points that puts a share ``f`` on one side keeps at most
    ``phi(z)^2 / (f (1 - f))`` of the sum of squares between its sides, ``z`` the normal quantile at ``1 - f``
    (the truncated normal's means); two groups are one population unless the estimates of the clients their
    centres pool (the others' could outweigh them), projected on the line through the centres, keep
    :data:`BIMODAL` times that between them. A small group far from a
    large one keeps far more (at 16 of 10^5 clients the bound is 0.2%), and so do separated groups of any
    size, whose sides keep nearly all."""
    labels, parts, centers, _ = state
    pooled = np.zeros(len(labels), dtype=bool)     # the clients a centre pools: far ones (outliers) bounded out
    for g, part in enumerate(parts):
        pooled[labels == g] = _pooled_clients(part)
    for g in range(1, len(centers)):
        for h in range(g):
            union = ((labels == g) | (labels == h)) & pooled
            side = labels[union] == g
            if side.all() or not side.any():    # a side pools no client (also both: a small penalty): no split
                continue
            z = theta[union].reshape(len(side), -1) @ (centers[g] - centers[h]).ravel()
            f = side.mean()
            within = sum(((part - part.mean()) ** 2).sum() for part in (z[side], z[~side]))
            total = ((z - z.mean()) ** 2).sum()
            if total - within <= BIMODAL * norm.pdf(norm.isf(f)) ** 2 / (f * (1.0 - f)) * total:
                return g, h
    return None


#: How far above a split of normal points a split must keep its sum of squares between its sides
#: (:func:`_population_twice`): two equal groups are one population below ``3 sigma`` apart.
BIMODAL = 1.1


def _without_smallest(state):
    """The labels with the smallest group's clients moved to their next cheapest centre."""
    labels, _, _, cost = state
    smallest = labels.max()
    cost = cost.copy()
    cost[:, smallest] = np.inf
    return np.where(labels == smallest, cost.argmin(axis=1), labels)


def _joined(parts, labels, theta):
    """The groups' solutions as one :class:`CentralResult` over all clients, ``center`` per client (with one
    group, the centre's read-only view as each client's)."""
    if len(parts) == 1:
        return parts[0]._replace(center=np.broadcast_to(parts[0].center, theta.shape))
    K, R, p = theta.shape
    nu, center = np.empty_like(theta), np.empty_like(theta)
    pooled, distance, threshold = np.empty((K, R), bool), np.empty((K, R)), np.empty((K, R))
    for g, part in enumerate(parts):
        members = labels == g
        nu[members], center[members], pooled[members] = part.nu, part.center, part.pooled
        distance[members], threshold[members] = part.distance, part.threshold
    return CentralResult(nu, center, pooled, distance, threshold, sum(part.n_iter for part in parts),
                         all(part.converged for part in parts))
