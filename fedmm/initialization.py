"""Starting values for every method (FedGrEM App. C.1 and B: local EM starts, then alignment).

``init`` chooses how the starts are made:

- ``"family"``: the family's own start (k-means for Gaussians, a random
  partition for regressions) then one M-step; on each client's data for
  per-client methods, on the pooled data for pooled ones. One start per
  restart.
- ``"local-em"``: local EM with ``n_init`` restarts on every client (each
  client keeps its best), then the clients' labels are aligned
  (:mod:`fedmm.alignment`). The paper initializes every federated method so
  (App. B). One start.
- ``"common"``: the server broadcasts one start to every client, as FedEM
  does, so no alignment is needed. The server holds no data: the start is
  the family's start on one client drawn at random (a new client for each
  restart), with uniform mixing proportions.
- ``"trimmed-pooled"``: EM with pooled components and every client's own
  mixing proportions (FedEM's model, and FedGrEM's at ``lambda = infinity``)
  on the clients' summed statistics, each
  round leaving out the ``trim`` fraction of clients whose data the current
  fit explains worst (the trimmed likelihood of Neykov et al., 2007, at the
  level of clients), from candidate starts drawn on random halves of the
  clients; the best trimmed fit is broadcast and every client then fits its
  own mixing proportions to it (EM on the proportions). One start, in one labelling, that outlier
  clients cannot capture, and that has the pooled data's accuracy where
  clients are alike: where local EM cannot start (mixtures of regressions at
  ``n_k = 150``, components missing on label-skewed clients) the
  federation still can.
- ``"pooled-and-local"``: both of the above, the trimmed pooled start and
  (where every client has at least ``n_components`` samples) the aligned
  local-EM start, tried in that order; the strategy keeps the run it
  prefers (:meth:`fedmm.algorithms.Strategy.better_run`). FedGrEM's default: each
  start fails where the other holds. Local EM cannot start mixtures of
  regressions at ``n_k = 150`` nor label-skewed clients, and the pooled
  start can be captured by adversarial clients that are more than the
  trimmed fraction, or that put all their samples on one point (a mixture's
  likelihood is unbounded there, so that client fits best and is never
  trimmed).
- user-supplied weights and parameters: one start.

``"auto"`` is the method's own default (``Strategy.default_init``).
"""

import numpy as np

from .alignment import align
from .algorithms._base import em_update
from .algorithms.local import LocalEM
from .clients import as_clients, fit_weights
from .engine import fit_restarts
from .families import MixtureParams, pool_stats
from .robust import TRIM, client_seeds, first_best, kept_clients

INITS = ("auto", "family", "local-em", "common", "trimmed-pooled", "pooled-and-local")
#: Candidate starts of the trimmed pooled start, and the concentration steps each gets before the best is kept.
CANDIDATES, CANDIDATE_STEPS = 10, 20
#: The most rows of its half of the clients a candidate's family start (k-means) is drawn from.
CANDIDATE_ROWS = 20_000

__all__ = ["INITS", "make_starts", "align_params", "pooled_family_start", "client_family_starts", "common_start",
           "local_em_start", "trimmed_pooled_start"]
#: Starts that need the rows of several clients in one place (k-means on pooled rows).
POOLING_INITS = ("trimmed-pooled", "pooled-and-local")


def pooled_family_start(family, data, n_components, random_state):
    """The family's starting responsibilities on the pooled rows, then one M-step, broadcast to every client."""
    resp = family.initial_resp(data.X, data.y, n_components, random_state)
    stats = pool_stats(family.stats_from_resp(data, resp))
    return em_update(family, stats, data.n_samples.sum(keepdims=True)).broadcast(data.n_clients)


def client_family_starts(clients, n_components, random_state):
    """Every client's own family start (:func:`fedmm.clients.client_family_starts`), from a seed per client."""
    _check_clients_can_start(clients.n_samples, n_components)
    return clients.family_starts(client_seeds(random_state, clients.n_clients), n_components)


def _rows(clients, what):
    """The clients' rows in this process, for starts that pool rows; a clear error across separate parties."""
    data = getattr(clients, "data", None)
    if data is None:
        raise ValueError(f"{what} pools the rows of several clients (k-means on them), which separate parties "
                         "cannot do; use init='local-em' or 'common', or give initial values (weights_init and "
                         "means_init / coef_init).")
    return data


def _check_clients_can_start(n_samples, n_components):
    small = np.flatnonzero(n_samples < n_components)
    if small.size:
        k = small[0]
        raise ValueError(f"client {k} has {n_samples[k]} samples, fewer than n_components={n_components}, so it "
                         "cannot make its own start (init='family' or 'local-em' start every client from its own "
                         "data); use init='common', or give initial values (weights_init and means_init / coef_init).")


def common_start(clients, n_components, random_state):
    """One client's family start, broadcast to every client with uniform proportions.

    The client is drawn at random among those with at least ``n_components`` samples.
    """
    n_k = clients.n_samples
    eligible = np.flatnonzero(n_k >= n_components)
    if eligible.size == 0:
        raise ValueError(f"init='common' needs a client with at least n_components={n_components} samples to draw "
                         "the start from; give initial values (weights_init and means_init / coef_init) instead.")
    k = eligible[random_state.randint(eligible.size)]
    start = clients.family_starts(client_seeds(random_state, 1), n_components, which=[k]).broadcast(len(n_k))
    return start._replace(weights=np.full_like(start.weights, 1.0 / n_components))


def trimmed_pooled_start(family, data, n_components, n_init, max_iter, tol, random_state, trim=TRIM):
    """Trimmed pooled EM (see the module docstring), then each client's proportions at its components.

    Each round keeps the ``K - floor(trim K)`` clients with the highest mean
    log-likelihood per sample (per sample, so that a large client is not
    trimmed for its size) and takes the M-step of their summed statistics:
    with equal client sizes a concentration step, so the trimmed
    log-likelihood never decreases (as in FAST-LTS and the trimmed likelihood
    estimator). A start
    drawn from all clients' data can already hold an outlier client's
    component, so, as those algorithms do, the candidates start from the
    family's start on random halves of the clients: ``max(n_init, 10)`` of
    them run ``CANDIDATE_STEPS`` concentration steps, and the best continues
    to convergence.
    """
    n_k = data.n_samples
    K = data.n_clients

    def concentrate(params, steps):
        previous = score = None
        for _ in range(steps):
            loglik, stats = family.estep(data, params)
            keep = kept_clients(loglik / n_k, trim)
            score = loglik[keep].sum() / n_k[keep].sum()
            kept_stats = type(stats)(*(None if f is None else f[keep] for f in stats))
            shared = em_update(family, pool_stats(kept_stats), n_k[keep].sum(keepdims=True)).broadcast(K)
            # Components pooled, proportions each client's own (Algorithm 1's w_r = N_r / n_k; FedEM eq. (9)):
            # the model FedGrEM fits, at lambda = infinity.
            params = shared._replace(weights=stats.N / n_k[:, None])
            if previous is not None and abs(score - previous) < tol:
                break
            previous = score
        return params, score

    candidates = []
    for _ in range(max(n_init, CANDIDATES)):
        subset = _candidate_rows(data, random_state)
        if subset.n_samples.sum() < n_components:
            subset = data
        start = pooled_family_start(family, subset, n_components, random_state).take([0]).broadcast(K)
        candidates.append(concentrate(start, CANDIDATE_STEPS))
    best = candidates[first_best([score for _, score in candidates])][0]
    best, _ = concentrate(best, max_iter)
    return best._replace(weights=fit_weights(family, data, best, max_iter=max_iter, tol=tol))


def _candidate_rows(data, random_state):
    """The rows a candidate start is drawn on: a random half of the clients, and of their rows at most
    ``CANDIDATE_ROWS`` drawn at random (a rough start, which the concentration steps on all rows refine;
    k-means on every row of half of a large federation cost more than the steps)."""
    K = data.n_clients
    half = np.sort(random_state.choice(K, size=max((K + 1) // 2, 1), replace=False)) if K >= 4 else np.arange(K)
    rows = data.client_rows(half)
    if len(rows) <= CANDIDATE_ROWS:
        return data.clients(half)
    keep = np.sort(random_state.choice(len(rows), CANDIDATE_ROWS, replace=False))  # positions among the half's rows
    held = np.bincount(np.searchsorted(np.cumsum(data.n_samples[half]), keep, side="right"), minlength=len(half))
    return data.take_rows(rows[keep], held[held > 0], data.client_ids[half][held > 0])


def align_params(params, method, random_state):
    """Relabel every client's components into one labelling; returns ``(params, Alignment)``."""
    alignment = align(params.theta, method, random_state=random_state)
    return params.permute(alignment.perms), alignment


def local_em_start(family, clients, n_components, n_init, max_iter, tol, alignment, random_state):
    """Local EM on every client (best of ``n_init`` per client), aligned across clients."""
    starts = [client_family_starts(clients, n_components, random_state) for _ in range(n_init)]
    local = fit_restarts(LocalEM(), family, clients, starts, max_iter, tol).params
    return _aligned(local, alignment, random_state)


def make_starts(family, algorithm, data, n_components, *, init, n_init, max_iter, tol, alignment,
                random_state, user=None):
    """All starting points of one fit, each with the alignment applied to it (or None).

    Per-client starts of a method that pools estimates across clients are
    aligned; per-client methods need no alignment (their clients never meet)
    and shared or common starts have one labelling already.

    Parameters
    ----------
    data : FederatedData or a transport of clients (:mod:`fedmm.clients`)
        Across separate parties (:mod:`fedmm.flower`) every start but those that pool rows
        (``"trimmed-pooled"``, ``"pooled-and-local"``, and ``"family"`` for shared methods) works.
    user : tuple (weights, theta) or MixtureParams, optional
        User-supplied start; overrides ``init``.

    Returns
    -------
    list of (MixtureParams, Alignment or None)
    """
    clients = as_clients(family, data)
    if isinstance(user, MixtureParams):  # a warm start: the last fit's parameters
        return [(user, None)]
    if user is not None:
        return [(clients.user_start(*user), None)]
    if init not in INITS:
        raise ValueError(f"Unknown init {init!r}; choose one of {INITS}.")
    init = algorithm.default_init if init == "auto" else init
    if init == "local-em":
        if algorithm.shared:
            raise ValueError("init='local-em' gives every client its own start, but this method shares one "
                             "estimate across clients; use init='family' or 'common'.")
        return [local_em_start(family, clients, n_components, n_init, max_iter, tol, alignment, random_state)]
    if init == "common":
        return [(common_start(clients, n_components, random_state), None) for _ in range(n_init)]
    if init in POOLING_INITS:
        rows = _rows(clients, f"init={init!r}")
        starts = [(trimmed_pooled_start(family, rows, n_components, n_init, max_iter, tol, random_state), None)]
        if init == "pooled-and-local" and rows.n_samples.min() >= n_components and rows.n_clients > 1:
            starts.append(local_em_start(family, clients, n_components, n_init, max_iter, tol, alignment,
                                         random_state))
        return starts
    if algorithm.shared:
        rows = _rows(clients, "init='family' for a method that shares one estimate")
        return [(pooled_family_start(family, rows, n_components, random_state), None) for _ in range(n_init)]
    starts = [client_family_starts(clients, n_components, random_state) for _ in range(n_init)]
    if algorithm.per_client:
        return [(start, None) for start in starts]
    return [_aligned(start, alignment, random_state) for start in starts]


def _aligned(params, alignment, random_state):
    if alignment is None:
        raise ValueError("This method pools the clients' estimates, so per-client starts need an alignment "
                         "method (alignment='consensus', ...) or init='common'.")
    return align_params(params, alignment, random_state)
