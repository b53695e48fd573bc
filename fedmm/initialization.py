"""Starting values for every method (FedGrEM App. C.1 and B: local EM starts, then alignment).

Every start is made from what clients send (their own starts, sums, log-likelihoods), never from
their rows, so the one in this process is the one separate parties run (:mod:`fedmm.flower`).

``init`` chooses how the starts are made:

- ``"family"``: the family's own start (k-means for Gaussians, a random
  partition for regressions) then one M-step, on each client's data; for
  methods that share their components (pooled EM, FedEM), the server clusters the clients' starts
  into one (:func:`clustered_start`). One start per restart.
- ``"local-em"``: local EM with ``n_init`` restarts on every client (each
  client keeps its best), then the clients' labels are aligned
  (:mod:`fedmm.alignment`). The paper initializes every federated method so
  (App. B). One start.
- ``"common"``: the server broadcasts one start to every client, as FedEM
  does, so no alignment is needed. The server holds no data: the start is
  the family's start on one client drawn at random (a new client for each
  restart), with uniform mixing proportions.
- ``"trimmed-pooled"``: EM with pooled components and every client's own mixing proportions (FedEM's
  model, and FedGrEM's at ``lambda = infinity``) on the clients' summed statistics, each round leaving
  out the ``trim`` fraction of clients whose data the current fit explains worst (the trimmed
  likelihood of Neykov et al., 2007, at the level of clients;
  :class:`fedmm.algorithms.pooled.TrimmedPooledEM`), from candidate starts each clustered by the
  server from the clients' own starts on a random half of the clients
  (:func:`clustered_start`); the best trimmed fit is broadcast and every client then fits its own
  mixing proportions to it (EM on the proportions). One start, in one labelling, that outlier clients
  cannot capture, and that has the pooled data's accuracy where clients are alike: where local EM
  cannot start (mixtures of regressions at ``n_k = 150``, components missing on label-skewed clients)
  the federation still can.
- ``"pooled-and-local"``: both of the above, the trimmed pooled start and
  (where every client has at least ``n_components`` samples) the aligned
  local-EM start, where each client also runs EM from the pooled start and keeps it if it fits its rows
  better (:func:`_own_or_federation`), tried in that order; the strategy
  keeps the run it prefers (:meth:`fedmm.algorithms.Strategy.better_run`). FedGrEM's default: each
  start fails where the other holds. Local EM cannot start mixtures of
  regressions at ``n_k = 150`` nor label-skewed clients, and the pooled
  start can be captured by adversarial clients that are more than the
  trimmed fraction, or that put all their samples on one point (a mixture's
  likelihood is unbounded there, so that client fits best and is never
  trimmed).
- ``"screened"``: for many features of which few separate the components (sparse FedGrEM), where the
  dense starts' k-means and EM see mostly noise: the features whose pooled variance (the units' sums: no new
  query) exceeds the median feature's by more than :data:`SCREEN` standard errors of a variance estimate
  (the screening step of IF-PCA, Jin & Wang, Ann. Stat. 2016; variance screening, Azizyan, Singh & Wasserman,
  NeurIPS 2013), then the clients' own family starts on those features only, clustered by the server
  (:func:`clustered_start`) or aligned into one labelling (:func:`aligned_start`); elsewhere the means start at
  the pooled mean, and every client fits its variances to that start (as to a user's means). One start. Where
  no feature stands out (the components differ on half the features or more, or weakly on many), there is no
  sparse structure to start from, and the start is ``"pooled-and-local"``'s. It needs the features' variances
  in the fit's units: identity or spherical covariances (diagonal, full and tied units scale every feature to
  variance 1). Sparse FedGrEM's default where it can run, ``"pooled-and-local"`` elsewhere.
- user-supplied weights and parameters: one start.

``"auto"`` is the method's own default (``Strategy.default_init``).
"""

from typing import NamedTuple, Optional

import numpy as np

from .alignment import align, match_each
from .algorithms.local import LocalEM
from .algorithms.pooled import TrimmedPooledEM, trimmed_loglik
from .clients import as_clients
from .engine import best_of_starts, drive, side_by_side, single_pass
from .families import MixtureParams
from .families._base import combine_by_label
from .protocol import Broadcast
from .robust import TRIM, best_few, client_seeds, first_best, trusted_sizes

INITS = ("auto", "family", "local-em", "common", "trimmed-pooled", "pooled-and-local", "screened")
#: A feature enters the screened start where its pooled variance exceeds the median feature's by this many
#: standard errors of a variance estimate from ``n`` rows, ``sqrt(2 / n)`` relative (Gaussian noise): a
#: Gaussian noise feature passes with probability 4e-7 at ``n = 100`` and 1e-8 at 1,000 (the chi-square's
#: right tail is heavier than the normal's), heavier-tailed noise more often.
SCREEN = 6.0
#: Candidate starts of the trimmed pooled start, the concentration steps each gets, and how many of the best then
#: continue side by side to convergence, where the best is kept (FAST-LTS: two C-steps from every start, then the
#: best ten to convergence; Rousseeuw & Van Driessen 2006, Section 3). docs/research/performance.md measures it.
CANDIDATES, CANDIDATE_STEPS, FINALISTS = 10, 2, 5

__all__ = ["INITS", "Start", "make_starts", "with_own_fits", "align_params", "clustered_start",
           "client_family_starts", "common_start", "local_em_start", "trimmed_pooled_start", "screened_start",
           "screened_features", "screenable"]


def client_family_starts(clients, n_components, random_state, which=None):
    """The clients' own family starts (:func:`fedmm.clients.client_family_starts`), from a seed per client;
    ``which``: those clients only."""
    n_starts = clients.n_clients if which is None else len(which)
    return clients.family_starts(client_seeds(random_state, n_starts), n_components, which)


def clustered_start(family, starts, sizes, n_components, random_state):
    """One start (a single client's row) from clients' own starts, combined by the server.

    Every client's components ``theta_r^{(k)}`` stand for ``sizes_k w_r^{(k)}`` samples; the family
    combines them into ``n_components`` shared components (:meth:`~fedmm.families.Family.combine_starts`):
    Gaussians by k-FED, weighted k-means of the components (Dennis, Li & Smith, ICML 2021, one-shot
    federated clustering), then the M-step of the rows the members stand for; regressions, whose
    starts are random partitions, by label.

    Parameters
    ----------
    starts : MixtureParams of shape (K', R, ...)
    sizes : ndarray of shape (K',)
        What each client counts: :func:`fedmm.robust.trusted_sizes` of the claimed sizes.
    """
    return family.combine_starts(starts, sizes[:, None] * starts.weights, n_components, random_state)


def aligned_start(starts, sizes, random_state):
    """One start (a single client's row) from clients' own starts aligned into one labelling
    (:func:`align_params`), each label's means averaged by the rows they stand for (:func:`combine_by_label`):
    each client's components go to different components of the start. k-FED's clustering (:func:`clustered_start`) pools
    components, not clients' labellings, so a few clients shifted alike farther than the components lie apart
    become a component of their own: three of ten shifted 4 on 5 features off a sparse support took every
    candidate and the fit in 4 of 10 seeds (an outside audit, ``docs/research/sparse.md``)."""
    aligned, _ = align_params(starts, "consensus", random_state)
    return combine_by_label(aligned, sizes[:, None] * aligned.weights)


def common_start(clients, n_components, random_state):
    """One client's family start, broadcast to every client with uniform proportions.

    The client is drawn at random among those with at least ``n_components`` samples.
    """
    able = _able_clients(clients.n_samples, n_components)
    k = able[random_state.randint(able.size)]
    start = clients.family_starts(client_seeds(random_state, 1), n_components, which=[k]).broadcast(clients.n_clients)
    return start._replace(weights=np.full_like(start.weights, 1.0 / n_components))


def trimmed_pooled_start(family, clients, n_components, n_init, max_iter, tol, random_state, trim=TRIM):
    """Trimmed pooled EM (see the module docstring), then each client's proportions at its components.

    The clients that can (at least ``n_components`` samples) send their own starts once; each candidate
    is the server's :func:`clustered_start` of a random half of them: a start drawn from all clients can
    already hold an outlier client's component, so, as FAST-LTS and the trimmed likelihood estimator do,
    the candidates start from random halves. ``max(n_init, CANDIDATES)`` of them run, side by side
    (:func:`fedmm.engine.drive`: one message per round for all), ``CANDIDATE_STEPS`` rounds of
    :class:`~fedmm.algorithms.pooled.TrimmedPooledEM`, the ``FINALISTS`` with the highest trimmed log-likelihood
    per sample continue side by side to convergence, the best of them is kept, and every client fits its own
    proportions to it.
    """
    return drive(clients, [_trimmed_pooled(family, clients, n_components, n_init, max_iter, tol, random_state,
                                           trim)])[0]


def _trimmed_pooled(family, clients, n_components, n_init, max_iter, tol, random_state, trim=TRIM):
    """:func:`trimmed_pooled_start` as a generator of its queries (:func:`fedmm.engine.drive`)."""
    n_k = clients.n_samples
    K = clients.n_clients
    starts, sizes = _own_starts(clients, n_components, random_state)
    strategy = TrimmedPooledEM(trim)
    candidates = []
    for _ in range(max(n_init, CANDIDATES)):
        able = len(sizes)
        half = np.sort(random_state.choice(able, size=(able + 1) // 2, replace=False)) if able >= 4 else np.arange(able)
        candidates.append(clustered_start(family, starts.take(half), sizes[half], n_components, random_state)
                          .broadcast(K))
    # Each candidate's last log-likelihoods come with one more round from its last parameters. Its round is the
    # E-step at the parameters sent, whatever the client's state, so a finalist's is its continuation's first.
    # Only where all run side by side (up to 10^4 clients): in batches or one at a time, every candidate's replies
    # would be kept to the choice (85 MB each at 10^5), where memory, not round trips, runs short (side_by_side).
    ahead = (lambda params: ("step", strategy, Broadcast(params), None)) if side_by_side(K) >= len(candidates) \
        else None
    score = lambda run: trimmed_loglik(run[0].loglik, n_k, trim)[1]  # noqa: E731
    runs = yield "spawn", [single_pass(strategy, family, clients, start, CANDIDATE_STEPS, tol, ahead)
                           for start in candidates]
    # The finalists' proportions are refitted in the message that asks their last log-likelihoods.
    refit = lambda params: ("fit_weights", params, None, max_iter, tol)  # noqa: E731
    finalists = [single_pass(strategy, family, clients, runs[i][0].params, max_iter, tol, refit, runs[i][1])
                 for i in best_few([score(r) for r in runs], FINALISTS)]
    del runs   # the others' replies go before the finalists run
    finals = yield "spawn", finalists
    result, weights = finals[first_best([score(r) for r in finals])]
    return result.params._replace(weights=weights)


class Start(NamedTuple):
    """One start of a fit: its parameters, the alignment applied to them (or None), and where they are each
    client's own fit, EM on its rows alone (the local-EM start of ``"pooled-and-local"``), its log-likelihoods
    (K,) there (:meth:`fedmm.algorithms.Strategy.own_fits` compares the fit with them)."""
    params: MixtureParams
    alignment: object = None
    own_loglik: Optional[np.ndarray] = None


def with_own_fits(strategy, clients, result, start, n_parameters):
    """``result`` (a :class:`fedmm.engine.FitResult`) with the clients :meth:`~fedmm.algorithms.Strategy.own_fits`
    names given their own fit from ``start`` (a :class:`Start` with ``own_loglik``; else ``result`` as it is), its
    components relabelled to match the estimate it replaces (:func:`fedmm.alignment.match_each`): component ``r``
    means the same on every client."""
    if start.own_loglik is None:
        return result
    keep = strategy.own_fits(result, start, clients.n_samples, n_parameters,
                             lambda which: drive(clients, [_loglik(_located(result.params, start.params, which))])[0])
    if keep is None or not keep.any():
        return result
    own = _relabelled(start.params, result.params)
    return result._replace(params=own.where(keep, result.params), own_fit=np.flatnonzero(keep),
                           loglik=np.where(keep, start.own_loglik, result.loglik))


def _relabelled(own, params):
    """Each client's own fit ``own`` labelled to match its estimate ``params`` (:func:`fedmm.alignment.match_each`)."""
    return own.permute(match_each(params.theta, own.theta))


def _located(params, own, which):
    """``params`` with the own fit's locations (means or coefficients) for the clients ``which`` (indices)."""
    theta = params.theta.copy()
    theta[which] = _relabelled(own.take(which), params.take(which)).theta
    return params._replace(theta=theta)


def align_params(params, method, random_state):
    """Relabel every client's components into one labelling; returns ``(params, Alignment)``."""
    alignment = align(params.theta, method, random_state=random_state)
    return params.permute(alignment.perms), alignment


def local_em_start(family, clients, n_components, n_init, max_iter, tol, alignment, random_state):
    """Local EM on every client (best of ``n_init`` per client), aligned across clients."""
    local = drive(clients, [_local_em(family, clients, n_components, n_init, max_iter, tol, random_state)])[0]
    return _aligned(local.params, alignment, random_state)


def _local_em(family, clients, n_components, n_init, max_iter, tol, random_state):
    """Local EM's run, not aligned, as a generator of its queries (:func:`fedmm.engine.drive`): its starts asked
    in one message, with what runs beside it asks (the trimmed pooled start's first round)."""
    seeds = [client_seeds(random_state, clients.n_clients) for _ in range(n_init)]
    starts = yield "together", [("family_starts", each, n_components) for each in seeds]
    return (yield from best_of_starts(LocalEM(), family, clients, starts, max_iter, tol))


def _own_or_federation(family, clients, local, pooled, max_iter, tol):
    """Each client's local EM (``local``, a run), or its EM from the federation's estimate ``pooled`` where that
    fits its rows better by more than ``tol`` a sample (EM's own tolerance: within it they are one optimum).

    As with ``n_init``, a client keeps the start that fits its own rows best: one whose own starts all end in a
    poor optimum takes the optimum its rows share with the others, and one whose rows differ keeps its own. At
    10^5 clients of 50 rows (5 components in 10 dimensions) a few hundred held a poor optimum, and one of
    FedGrEM's centres pooled them (docs/research/groups.md). One query (local EM's rounds run on the
    clients). ``(params, each client's log-likelihood)``."""
    shared = drive(clients, [best_of_starts(LocalEM(), family, clients, [pooled], max_iter, tol)])[0]
    better = (shared.loglik - local.loglik) / clients.n_samples > tol
    return shared.params.where(better, local.params), np.where(better, shared.loglik, local.loglik)


def make_starts(family, algorithm, data, n_components, *, init, n_init, max_iter, tol, alignment,
                random_state, user=None, moments=None):
    """All starting points of one fit, each with the alignment applied to it (or None).

    Per-client starts of a method that pools estimates across clients are
    aligned; per-client methods need no alignment (their clients never meet)
    and shared or common starts have one labelling already.

    Parameters
    ----------
    data : FederatedData or a transport of clients (:mod:`fedmm.clients`)
        Every start runs on any transport, in this process or across separate parties (:mod:`fedmm.flower`).
    user : tuple (weights, theta) or MixtureParams, optional
        User-supplied start; overrides ``init``.
    moments : Moments, optional
        The pooled moments in the fit's units (:meth:`fedmm.units.Units.map_moments`): ``init="screened"``'s.

    Returns
    -------
    list of Start
    """
    return [Start(*start) for start in _starts(family, algorithm, data, n_components, init=init, n_init=n_init,
                                               max_iter=max_iter, tol=tol, alignment=alignment,
                                               random_state=random_state, user=user, moments=moments)]


def _starts(family, algorithm, data, n_components, *, init, n_init, max_iter, tol, alignment, random_state,
            user=None, moments=None):
    """:func:`make_starts`' starts as tuples of :class:`Start`'s fields."""
    clients = as_clients(family, data)
    clients.ledger.phase = "start"
    if isinstance(user, MixtureParams):  # a warm start: the last fit's parameters
        return [(user, None)]
    if user is not None:
        return [(clients.user_start(*user), None)]
    if init not in INITS:
        raise ValueError(f"Unknown init {init!r}; choose one of {INITS}.")
    if init == "auto":
        init = algorithm.default_init
        if init == "screened" and not screenable(family):
            init = "pooled-and-local"
    if init == "local-em":
        if algorithm.shared:
            raise ValueError("init='local-em' gives every client its own start, but this method shares one "
                             "estimate across clients; use init='family' or 'common'.")
        return [local_em_start(family, clients, n_components, n_init, max_iter, tol, alignment, random_state)]
    if init == "common":
        return [(common_start(clients, n_components, random_state), None) for _ in range(n_init)]
    if init == "screened" and family.needs_y and not getattr(family, "whiten", True):   # sparse regressions
        from .algorithms.sparse_start import FEW, regression_screened_start
        if len(moments.mean) > FEW:
            start = regression_screened_start(family, clients, n_components, len(moments.mean), random_state)
            return [(drive(clients, [start])[0], None)]
        init = "pooled-and-local"   # few features: nothing to screen, FedGrEM's start
    if init == "screened":
        keep = _screen(family, clients, moments)
        if keep.size:
            return [(screened_start(family, clients, n_components, moments, keep, random_state), None)]
        init = "pooled-and-local"   # no feature stands out: no sparse structure to start from
    if init in ("trimmed-pooled", "pooled-and-local"):
        # The two starts side by side (fedmm.engine.drive): their rounds share messages.
        starts = [_trimmed_pooled(family, clients, n_components, n_init, max_iter, tol, random_state)]
        if init == "pooled-and-local" and clients.n_samples.min() >= n_components and clients.n_clients > 1:
            starts.append(_local_em(family, clients, n_components, n_init, max_iter, tol, random_state))
        pooled, *local = drive(clients, starts)
        if not local:
            return [(pooled, None)]
        own, loglik = _own_or_federation(family, clients, local[0], pooled, max_iter, tol)
        return [(pooled, None), (*_aligned(own, alignment, random_state), loglik)]
    if algorithm.shares_components:
        return [(_shared_family_start(family, clients, n_components, random_state), None) for _ in range(n_init)]
    starts = [client_family_starts(clients, n_components, random_state) for _ in range(n_init)]
    if algorithm.per_client:
        return [(start, None) for start in starts]
    return [_aligned(start, alignment, random_state) for start in starts]


def screenable(family):
    """Whether ``init="screened"`` can run on ``family``: identity or spherical covariances, whose units keep
    the features' relative variances (a method's default of ``"screened"`` is ``"pooled-and-local"`` elsewhere)."""
    return getattr(family, "covariance_type", None) in ("identity", "spherical") or \
        (family.needs_y and not getattr(family, "whiten", True))   # regressions in per-feature units: sparse_start


def screened_features(variances, n):
    """The features whose variance (d,), pooled over ``n`` rows, exceeds the median feature's by more than
    :data:`SCREEN` standard errors (``sqrt(2 / n)`` of it); none where none does."""
    return np.flatnonzero(variances > np.median(variances) * (1.0 + SCREEN * np.sqrt(2.0 / n)))


def _screen(family, clients, moments):
    """``init="screened"``'s features (:func:`screened_features` of the pooled ``moments``), or a clear error
    where the family's units do not keep the features' variances."""
    if not screenable(family) or moments is None:
        raise ValueError("init='screened' selects features by their pooled variance: it is for Gaussian mixtures "
                         "with covariance_type 'identity' or 'spherical', whose units keep the features' "
                         f"variances; got {getattr(family, 'covariance_type', 'a mixture of regressions')!r}. Use "
                         "another init, or give initial values.")
    return screened_features(moments.second - moments.mean ** 2, trusted_sizes(clients.n_samples).sum())


def screened_start(family, clients, n_components, moments, keep, random_state):
    """``init="screened"`` (module docstring) on the features ``keep``. The clients that can send their family
    starts on those features once; as in :func:`trimmed_pooled_start`, each of :data:`CANDIDATES` candidates is
    the server's :func:`clustered_start` of a random half of them (a start from all clients can hold an outlier
    client's component), and another the same half's starts aligned (:func:`aligned_start`), each put at the pooled
    mean on the other features with the noise's variance (the median feature's, spherical); the clients score all
    candidates in one query and the one the median client fits best per sample wins (a client whose rows sit on
    one point fits a component there beyond what any data can, and would carry a mean, even a trimmed one; no
    minority of clients moves the median); every client then fits its variances to it."""
    return drive(clients, [_screened(family, clients, n_components, moments, keep, random_state)])[0]


def _screened(family, clients, n_components, moments, keep, random_state):
    """:func:`screened_start` as a generator of its queries (:func:`fedmm.engine.drive`)."""
    able = _able_clients(clients.n_samples, n_components)
    starts = clients.family_starts(client_seeds(random_state, able.size), n_components, able, features=keep)
    sizes = trusted_sizes(clients.n_samples)[able]
    noise = np.median(moments.second - moments.mean ** 2)
    candidates = []
    for _ in range(CANDIDATES):
        half = np.sort(random_state.choice(able.size, size=(able.size + 1) // 2, replace=False)) \
            if able.size >= 4 else np.arange(able.size)
        some = starts.take(half)
        for on_keep in (clustered_start(family, some, sizes[half], n_components, random_state),
                        aligned_start(some, sizes[half], random_state)):
            theta = np.broadcast_to(moments.mean, (1, n_components, len(moments.mean))).copy()
            theta[..., keep] = on_keep.theta
            scale = np.full(on_keep.scale.shape, noise) if family.estimates_scale else on_keep.scale
            candidates.append(MixtureParams(on_keep.weights, theta, scale).broadcast(clients.n_clients))
    logliks = yield "spawn", [_loglik(candidate) for candidate in candidates]
    best = candidates[first_best([np.median(loglik / clients.n_samples) for loglik in logliks])]
    return clients.user_start(best.weights[0], best.theta[0])


def _loglik(params):
    """A run that asks the clients' log-likelihoods at ``params`` (side by side with others: one query)."""
    return (yield "loglik", params)


def _shared_family_start(family, clients, n_components, random_state):
    """The family start of a method that shares its components: every able client's own start, clustered by the
    server (:func:`clustered_start`), broadcast."""
    starts, sizes = _own_starts(clients, n_components, random_state)
    return clustered_start(family, starts, sizes, n_components, random_state).broadcast(clients.n_clients)


def _own_starts(clients, n_components, random_state):
    """The own starts of the clients that can make one (at least ``n_components`` samples), and their trusted
    sizes: what the server clusters (:func:`clustered_start`)."""
    able = _able_clients(clients.n_samples, n_components)
    starts = client_family_starts(clients, n_components, random_state, able)
    return starts, trusted_sizes(clients.n_samples)[able]


def _able_clients(n_samples, n_components):
    """The clients with at least ``n_components`` samples, those that can make a start of their own; a clear
    error when there are none."""
    able = np.flatnonzero(n_samples >= n_components)
    if able.size == 0:
        raise ValueError(f"No client has n_components={n_components} samples or more to make a start from; give "
                         "initial values (weights_init and means_init / coef_init).")
    return able


def _aligned(params, alignment, random_state):
    if alignment is None:
        raise ValueError("This method pools the clients' estimates, so per-client starts need an alignment "
                         "method (alignment='consensus', ...) or init='common'.")
    return align_params(params, alignment, random_state)
