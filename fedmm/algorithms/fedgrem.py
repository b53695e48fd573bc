"""FedGrEM: federated gradient EM with a robust central update (FedGrEM Sec. 2.3, Algorithm 1).

Each round, on every client: the E-step, ``w_hat_r = N_r / n_k``, and one gradient
step ``theta_tilde = theta + eta * grad Q-hat``. On the server: the central
update (:func:`fedmm.algorithms.central.central_update`) with penalty ``lambda_t``, which
pools clients near the consensus onto it and lets far ones (heterogeneous or
outlier clients) keep their own estimate. Clients send parameters, sizes and
their responsibility-weighted sums, from which the server evaluates each
client's variances at the parameters it sends back (the closed-form maximizer
of the client's Q-hat there) and pools them where the means are pooled.
"""

import warnings
from typing import Callable, NamedTuple

import numpy as np
from scipy.stats import chi2
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from .central import (CentralResult, GroupedResult, central_update, grouped_central_update, on_centre, pooling_share,
                      robust_centre)
from ..families import MixtureParams
from ..protocol import Broadcast
from ..robust import TRIM, trusted_sizes
from .tuning import N_FOLDS, PENALTY_CANDIDATES, select_penalty, sure_penalty
from .. import _params as P
from ._base import CLIENT_SERVER_CONSTRAINTS, CLIENT_SERVER_DOC, GradientStrategy, PrivateForm
# FedGrEM's parts, each in a module of its own; their names stay importable from here.
from .new_client import shrunk_client
from .outliers import (OUTLIER_LEVEL, VARIANCE_LEVEL, centre_pull, deviation_norms, outlier_scores,  # noqa: F401
                       rejects_estimate, scale_deviation, sole_holders, variance_information, variance_scores)
from .penalty import PENALTIES, SURE_PENALTIES, objective_scale, penalty_schedule, settle_penalty
from .variances import empty_components, noise_scale, pool_variances, robust_scale


class Consensus(NamedTuple):
    """FedGrEM's account of its last central update (noise units: ``theta / sigma_r``, :func:`noise_scale`).

    Attributes
    ----------
    center : ndarray of shape (K, R, p)
        Each client's consensus ``nu_bar`` (its group's centre) in the fitting units.
    pooled : ndarray of shape (K, R), bool
        Which clients' components were shrunk exactly onto the centre.
    distance : ndarray of shape (K, R)
        ``||theta_tilde_kr - nu_bar_r||`` in noise units.
    threshold : ndarray of shape (K, R)
        The pooling distance ``lambda_T / sqrt(n_k)`` (or per-component sizes); with ``shrinkage="linear"``,
        the distance each block moved towards the centre (:func:`fedmm.algorithms.central.linear_shrinkage`).
    sqrt_n_lambda : ndarray of shape (K, 1)
        ``sqrt(n_k) lambda_T``: ``n_k`` times the client's threshold.
    pooled_scale : ndarray of shape (K, R), bool
        Whose variances sit on the consensus (with the means, or by :func:`robust_scale`).
    objective_scale : ndarray of shape (K, 1)
        ``lambda_objective / lambda_T``: 1, except under ``penalty="sure"``, which chooses ``lambda_T`` every round
        while runs and restarts are compared (:func:`_penalized_loglik`) at the schedule's.
    labels : ndarray of shape (K,), int
        Each client's group (:func:`fedmm.algorithms.central.grouped_central_update`), 0 the largest.
    centers : ndarray of shape (G, R, p)
        The groups' centres in the fitting units.
    main_distance : ndarray of shape (K, R)
        ``||theta_tilde_kr - nu_bar_0r||`` in noise units: to the largest group's centre (``distance`` in its group).
    scale_distance : ndarray of shape (K, R or 1)
        How far each client's own variances at ``nu`` lie from the largest group's median client's:
        ``||deviation_kr||`` of their log-variances in noise units (:func:`scale_deviation`).
    scale_dof : ndarray of shape (K, 1), int
        The ``q`` coordinates of each deviation (the norm's degrees of freedom, :func:`variance_scores`).
    """

    center: np.ndarray
    pooled: np.ndarray
    distance: np.ndarray
    threshold: np.ndarray
    sqrt_n_lambda: np.ndarray
    pooled_scale: np.ndarray
    objective_scale: np.ndarray
    labels: np.ndarray
    centers: np.ndarray
    main_distance: np.ndarray
    scale_distance: np.ndarray
    scale_dof: np.ndarray


class FedGrEMState(NamedTuple):
    """The FedGrEM server between rounds: the model, the clients' sizes, the penalty schedule, and the last
    round's central solution, noise scale and variances' distances (:func:`scale_deviation`'s norms; None before)."""

    family: object
    n_k: np.ndarray
    schedule: Callable
    scale_schedule: Callable
    lam: float = np.nan
    lam_objective: float = np.nan
    central: CentralResult | None = None
    sigma: np.ndarray | None = None
    scale_pooled: np.ndarray | None = None
    pull: np.ndarray | None = None
    warned: bool = False
    lam_memory: tuple = (np.nan, np.nan, 0.0)
    w0: np.ndarray | None = None
    grouped: GroupedResult | None = None
    scale_distance: np.ndarray | None = None
    scale_dof: int = 0


class Pooled(NamedTuple):
    """One round's central update (:meth:`FedGrEM._pool`).

    Attributes
    ----------
    params : MixtureParams
        What the clients get: their proportions, ``nu``, and the variances at ``nu`` (pooled where the means are).
    grouped : GroupedResult
        The central problem's solution (its ``nu`` left out: ``params`` holds it), its groups and centres.
    sigma : ndarray
        The noise units the problem was solved in (:func:`noise_scale`).
    scale_pooled : ndarray of bool
        Which variances were pooled.
    own_scale : ndarray
        Each client's variances at ``nu`` before any pooling.
    warned : bool
        Whether the unconverged central problem has been warned of.
    lam, memory
        The round's penalty and its memory (:func:`settle_penalty`).
    """

    params: MixtureParams
    grouped: GroupedResult
    sigma: np.ndarray
    scale_pooled: np.ndarray
    own_scale: np.ndarray
    warned: bool
    lam: float
    memory: tuple


class FedGrEM(GradientStrategy):
    __doc__ = f"""FedGrEM (``method="fedgrem"``): robust, adaptive federated gradient EM (``docs/fedgrem.md``).

    Parameters
    ----------
    C_eta, eta_rule
        Step sizes (:class:`~fedmm.algorithms._base.GradientStrategy`).
    penalty : {{"sure-floored", "paper", "sure", "auto", "theory"}}, float or callable, default="sure-floored"
        The penalty ``lambda_t`` (:func:`penalty_schedule`): "sure-floored", the larger of SURE's choice
        and the paper's ``lambda_t`` (pools as SURE does where clients are alike, is the paper's FedGrEM
        where they differ; ``docs/units.md``); "paper", App. B.1's schedule; "sure", chosen every round
        by Stein's unbiased estimate of the central update's squared error, trimmed over clients
        (:func:`fedmm.algorithms.tuning.sure_penalty`); "auto", one of
        :data:`fedmm.algorithms.tuning.PENALTY_CANDIDATES` by
        5-fold cross-validated likelihood trimmed over clients and the one-standard-error rule
        (:meth:`tune`; each client deals and scores its own folds, also on Flower); "theory",
        Assumption A.7's recursion; a constant (``inf``: gradient FedEM) or a function of the round ``t``.
    penalty_params : dict, optional
        Constants of the "paper" (``lambda0``, ``kappa``, ``C``) or "theory" (``kappa0``, ``r_w``,
        ``r_theta``, ``W``, ``E1``, ``eta_bar``) schedules.
    pooling_sizes : {{"information", "client"}}, default="information"
        Sizes weighting the central problem: ``"information"``, each client's estimate weighs in the
        centre by ``n_k w_kr^{{[0]}} R`` while the thresholds stay the paper's, so clients that all pool
        meet at pooled EM's fixed point (:meth:`_blocks`); ``"client"``, ``n_k`` (the paper's).
    center_restarts : int, default=1
        fedmm's fix for poor local starts: after the rounds end, clients with a component that was not pooled restart
        from the consensus (their parameters set to the centre, proportions refitted) and FedGrEM runs again; repeated
        up to this many times while some client is unpooled. A restart is kept only for clients whose own term of
        FedGrEM's objective (log-likelihood minus central penalty) it raises significantly (likelihood-ratio test at 5%,
        one component's degrees of freedom): an inlier stuck in a poor local optimum gains hundreds of nats and is
        pooled, an outlier fits its own data worse from the consensus and keeps its first estimate, so robustness is
        kept. 0 gives the paper's algorithm. The engine runs the passes (:meth:`restart`, :meth:`keep_restart`).
    pool_variances : {True, False, "robust"}
        True: each variance moves towards the pooled variance by the share its mean moved towards the centre, so pooled
        components share it (:func:`pool_variances`). False keeps every client's own, as the paper's identity-covariance
        model never needs to decide. "robust": the variances get their own central update, the same problem as the
        means' on log-variances in noise units (:func:`robust_scale`), so a client's covariance is pooled when it is
        near the consensus whether or not its mean is; tied covariances and shared noise variances, one per client, are
        pooled as one group per client.
    central_tol, central_max_iter : float, int, default=1e-10, 1000
        Tolerance and cap of the central problem's alternating minimization.
    n_centers : "auto" or int, default="auto"
        The most centres of the central problem (fedmm's, beyond the paper; ``docs/fedgrem.md``, "Groups of
        clients"). Clients that form groups (regions, kinds of device) get a centre per group, chosen every
        round from the clients' estimates (:func:`fedmm.algorithms.central.grouped_central_update`): a
        centre is added where at least three clients pool onto it and the central objective falls by more
        than a centre's BIC cost (:func:`centre_cost`). With one population (the paper's model, outlier
        clients included) one centre remains. ``"auto"``: at most ``K // 3``; 1: the paper's single centre.
        ``groups_`` says which group each client joined. A centre holds three clients or more, so ``K`` clients
        form at most ``K // 3`` (one below six clients): more draws a warning, and the fit uses that many.
    reweighting : bool, default=True
        fedmm's, beyond the paper: while the clients have one centre, a client whose estimates it does not
        explain (:func:`outlier_scores` of its distance, above 1) pulls on it less the next round, and not at
        all from a score of 2 (:func:`centre_pull`): the reweighting step of robust estimators, which give a
        point flagged by a robust fit no weight in the next (Rousseeuw & van Zomeren 1990). In the paper's
        central problem an outlier's pull is bounded by ``sqrt(n_k) lambda``, never removed: where the honest
        clients hold a component weakly (components that overlap), it wins that component. False: the
        paper's central problem.
    {CLIENT_SERVER_DOC}
    """

    name = "fedgrem"
    robust = True
    _parameter_constraints = {
        **GradientStrategy._parameter_constraints,
        "penalty": P.any_of(P.one_of(*PENALTIES, "auto"), P.real(0.0), P.function),
        "penalty_params": P.any_of(P.instance(dict, text="a dict"), P.none),
        "center_restarts": P.integer(0),
        "pooling_sizes": P.one_of("information", "client"),
        "pool_variances": P.any_of(P.boolean, P.one_of("robust")),
        "central_tol": P.real(0.0, np.inf, low_open=True, high_open=True),
        "central_max_iter": P.integer(1),
        "n_centers": P.any_of(P.one_of("auto"), P.integer(1)),
        "reweighting": P.boolean,
        **CLIENT_SERVER_CONSTRAINTS}
    per_client = False
    sends_stats = True
    # The paper starts from aligned local EM (App. B, C.1); fedmm's default runs from it and from the trimmed
    # pooled start, which needs no client to fit every component alone (docs/units.md, "Starts"), and keeps
    # the local run only where it is significantly better for the honest majority (better_run). init="local-em"
    # gives the paper's.
    default_init = "pooled-and-local"
    # The group lasso's parameter count falls as more components pool, and BIC rewarded that with too many
    # components where clients differ (issue 43: 6 of 10 seeds at R = 5); held-out likelihood rewards extra
    # components that absorb the clients' differences (7 of 10 at R = 2). Each errs upwards: the fewer wins:
    # 10 of 10 in every case (validation/selection_heterogeneous.py).
    selection_criterion = "fewest"
    stop_on = "parameter_change"
    # The central update trades likelihood for pooling: no objective climbs every round. Its clients' gradient
    # steps still contract (C_eta < 2 with the safeguarded or preconditioned step).
    ascent = False

    # pooling_sizes="information": clients that all pool meet at pooled EM's fixed point (docs/fedgrem.md,
    # "Information weights in the centre").
    def __init__(self, C_eta=1.0, eta_rule="safeguarded", penalty="sure-floored", penalty_params=None,
                 center_restarts=1, pooling_sizes="information", pool_variances=True, central_tol=1e-10,
                 central_max_iter=1000, n_centers="auto", reweighting=True, participation=1.0, dropout=0.0):
        super().__init__(C_eta, eta_rule)
        self.n_centers = n_centers
        self.reweighting = reweighting
        self.penalty = penalty
        self.penalty_params = penalty_params
        self.center_restarts = center_restarts
        self.pooling_sizes = pooling_sizes
        self.pool_variances = pool_variances
        self.central_tol = central_tol
        self.central_max_iter = central_max_iter
        self.participation = participation
        self.dropout = dropout

    def check_clients(self, n_clients):
        most = max(n_clients // MIN_GROUP, 1)
        if self.n_centers != "auto" and self.n_centers > most:
            warnings.warn(f"FedGrEM(n_centers={self.n_centers}): {n_clients} clients form at most {most} centre(s), "
                          f"each holding {MIN_GROUP} clients or more, so the fit uses at most {most}; set n_centers to "
                          f"{most} or less, or 'auto'.", UserWarning, stacklevel=5)

    def tune(self, fit, clients, random_state):
        """``penalty="auto"``: the candidate of :data:`fedmm.algorithms.tuning.PENALTY_CANDIDATES` (this strategy with
        their options; its ``penalty_params`` stay with the first) chosen by trimmed 5-fold cross-validated
        likelihood and the one-standard-error rule (:func:`fedmm.algorithms.tuning.select_penalty`)."""
        if not isinstance(self.penalty, str) or self.penalty != "auto":
            return self, None
        chosen, selection = select_penalty(lambda train, candidates: fit(train, [self._with(c) for c in candidates]),
                                           clients, PENALTY_CANDIDATES, N_FOLDS, TRIM, random_state)
        return self._with(chosen), selection

    def _with(self, options):
        return clone(self).set_params(**options)

    def private(self, unit):
        """At the level of clients: the server takes the centre of the central problem with penalty ``clip`` of the
        clients' noisy updates under local noise (:func:`~fedmm.algorithms.central.robust_centre`), each client
        its own components about the release (the shrinkage step), and the clients go the whole way to their
        M-step (``eta_rule="current"``: a private fit's rounds are few, fixed by the budget, and the clip bounds
        each one's pull already, ``docs/privacy.md``)."""
        return PrivateForm(centre=robust_centre, personal=True, options={"eta_rule": "current"}) if unit == "client" \
            else None

    def distinct_components(self, model, index, p, scale_per_component):
        """The consensus once where any client sits on it (``pooled_``), plus each client off it by the group
        lasso's degrees of freedom (Yuan & Lin 2006, Sec. 4): ``1 + (p - 1) kept`` of its ``p`` parameters,
        ``kept = ||beta_g|| / ||beta_g^LS|| = 1 - threshold / distance``, the share of its distance to the
        consensus the central update leaves it (a client kept far off counts almost ``p``, one shrunk most of
        the way little more than 1). Variances that follow the mean's share (``pool_variances=True``,
        :func:`pool_variances`: ``kept`` of its own estimate, the rest the pooled one) count by ``kept``, the
        trace of that linear shrinkage (counted in full they charged a component shrunk three quarters of the
        way to the consensus ten variances against its mean's 3.2 parameters); others once per distinct value
        (``pooled_variances_``). With groups of clients (``groups_``), each group's consensus counts where one of
        its clients sits on it. Sparse FedGrEM's means count their free coordinates only (``_free_coordinates``)."""
        pooled = model.pooled_[index]
        groups = getattr(model, "groups_", np.zeros(len(pooled), dtype=int))[index]
        with np.errstate(divide="ignore", invalid="ignore"):
            kept = np.clip(1.0 - model.pooling_threshold_[index] / model.distance_to_center_[index], 0.0, 1.0)
        centre, free = getattr(model, "_free_coordinates", None) or (None, np.full(model.pooled_.shape, p))
        centres, on_centre = _held_centres(pooled, groups), pooled | (free[index] == 0)   # thresholded onto it
        means = _held_centres(on_centre, groups, None if centre is None else centre / p) + \
            np.where(on_centre, 0.0, 1.0 + (free[index] - 1) * kept).sum(axis=0) / p
        if self.pool_variances != "robust" and bool(self.pool_variances) and scale_per_component:
            return means, centres + np.where(pooled, 0.0, kept).sum(axis=0)
        shared = model.pooled_variances_[index]
        return means, (~shared).sum(axis=0) + _held_centres(shared, groups)

    def server_start(self, family, start, n_k):
        d, K = start.theta.shape[-1], len(n_k)
        n = trusted_sizes(n_k).mean()
        schedule = penalty_schedule(self.penalty, self.penalty_params, d, K, n)
        q = family.log_scale(start.scale[:1, :1], start.theta.shape[-1]).shape[-1]
        scale_schedule = penalty_schedule(self.penalty, self.penalty_params, q, K, n)
        return Broadcast(start), FedGrEMState(family, n_k, schedule, scale_schedule, w0=start.weights)

    def server_step(self, messages, state, t):
        lam = self._pilot(state.lam, state.schedule(t), t)
        pooled = self._pool(messages, state.family, lam, state.scale_schedule(t), t, state.warned, state.schedule(t),
                            state.lam_memory, state.w0, None if state.grouped is None else state.grouped.labels,
                            state.pull)
        grouped = pooled.grouped
        # With several centres a client far from the largest group's is another group's, and the grouped problem
        # decides where it belongs: reweighted there, a regression client lost its pull on its own group's centre
        # and joined the other group (tests/test_groups.py).
        pull = centre_pull(grouped.central.distance, messages.n[:, None] * messages.weights, messages.theta.shape[-1]) \
            if self.reweighting and len(grouped.centers) == 1 else None
        # Once a round (the engine looks up to three times), and only their norms kept (40 MB a pass at 10^5 clients).
        deviation = scale_deviation(state.family, pooled.own_scale, messages.theta.shape[-1], grouped.labels == 0,
                                    empty_components(messages.n, messages.weights))
        return Broadcast(pooled.params), state._replace(
            lam=pooled.lam, lam_objective=state.schedule(t), central=grouped.central, sigma=pooled.sigma,
            scale_pooled=pooled.scale_pooled, pull=pull, warned=pooled.warned,
            lam_memory=pooled.memory, grouped=grouped, scale_distance=deviation_norms(deviation),
            scale_dof=deviation.shape[-1])

    def _pilot(self, last, scheduled, t):
        """The ``lambda`` a round's central update is solved at first: the schedule's, or under SURE's penalties
        (``"sure"``, ``"sure-floored"``) last round's choice (the schedule's in round 1), from which :meth:`_pool`
        chooses."""
        return last if self.penalty in SURE_PENALTIES and t > 1 else scheduled

    def _pool(self, messages, family, lam, lam_scale, t, warned, scheduled, memory, w0, labels=None, pull=None):
        """The central update on ``theta_tilde / sigma_r`` (noise units), then the variances at ``nu``: a
        :class:`Pooled`, each client's block weighing in the centre by its ``pull``
        (:func:`centre_pull`; None: fully), for the clients whose ``messages``
        (and starting weights ``w0``) are given, from last round's groups ``labels`` (None: one group).

        With ``penalty="sure"``, ``lam`` is a pilot: its update's distances to the centre choose the round's
        ``lambda`` (:func:`fedmm.algorithms.tuning.sure_penalty`), and the update is solved again when the choice
        differs;
        ``"sure-floored"`` takes the larger of that choice and the schedule's ``scheduled``; both settle by
        :func:`settle_penalty` (``memory``).
        """
        empty = empty_components(messages.n, messages.weights)   # no rows: no variance of their own, on the centre
        sigma = noise_scale(family.coordinate_variances(messages.scale), empty)
        theta, (sizes, weights) = messages.theta / sigma, self._blocks(messages.n, w0)
        if pull is not None and (pull < 1.0).any():
            weights = np.asarray(sizes if weights is None else weights, dtype=float)
            weights = weights * (pull[:, None] if weights.ndim == 2 else pull)
        solve = dict(weights=weights, metric=family.central_metric(messages.stats), tol=self.central_tol,
                     max_iter=self.central_max_iter)
        grouped = self._central(theta, sizes, lam, labels, messages.n, solve)
        if self.penalty in SURE_PENALTIES:
            pilot, lam = lam, sure_penalty(grouped.central.distance, sizes, messages.stats.N, theta.shape[-1])
            if self.penalty == "sure-floored":
                lam = max(lam, scheduled)
            lam, memory = settle_penalty(lam, pilot, memory)
            if lam != pilot:
                grouped = self._central(theta, sizes, lam, grouped.labels, messages.n, solve)
        central, margin = self._refined(grouped.central, theta, sizes, weights, lam, solve, messages.n[:, None] * w0)
        del theta   # the round's (K, R, p) arrays go once read: 40 MB each at 10^5 clients, three held to the end
        central = on_centre(central, empty)
        if not central.converged and not warned:
            warnings.warn(f"FedGrEM's central problem stopped unconverged in round {t} after {central.n_iter} "
                          "iterations; that round uses its last iterate (feasible, not optimal). Clients far "
                          "apart with a small threshold slow it down: check for outlier clients or a small penalty.",
                          ConvergenceWarning, stacklevel=3)
            warned = True
        nu, central = central.nu * sigma, central._replace(nu=None)   # the broadcast carries it, in the fitting units
        grouped = grouped._replace(central=central)                     # and the iterate before on_centre goes
        # The variances that fit the parameters the clients now hold (left at theta_tilde, a small variance on
        # a component the server moved makes the next E-step collapse), pooled where the means are.
        scale = own_scale = family.update_scale(messages.stats, nu)
        scale_pooled = np.zeros_like(central.pooled)
        if self.pool_variances == "robust":
            sizes = self._sizes(messages.n, w0) if family.scale_per_component else messages.n
            scale, scale_pooled = robust_scale(family, scale, sizes, lam_scale, messages.theta.shape[-1],
                                               tol=self.central_tol, max_iter=self.central_max_iter)
        elif self.pool_variances and family.scale_per_component:
            # A block counts in the pooled variance as in the centre: by its margin.
            trust = (trusted_sizes(messages.n) / messages.n)[:, None]
            scale = pool_variances(scale, messages.stats.N * trust * margin, pooling_share(central))
            scale_pooled = central.pooled
        return Pooled(MixtureParams(messages.weights, nu, scale), grouped, sigma, scale_pooled, own_scale, warned,
                      lam, memory)

    def _central(self, theta, sizes, lam, labels, n_k, solve):
        """The central problem (:func:`fedmm.algorithms.central.central_update`) with one centre, or with
        ``n_centers`` at most (:func:`fedmm.algorithms.central.grouped_central_update`) from the groups
        ``labels``: a :class:`~fedmm.algorithms.central.GroupedResult`. A centre's price counts ``K`` clients of
        the median size ``n_k``: one client's claimed size cannot set it."""
        K, R, p = theta.shape
        if self.n_centers == 1 or K < 2 * MIN_GROUP:
            central = central_update(theta, sizes, lam, **solve)
            return GroupedResult(central, np.zeros(K, dtype=int), central.center[None], central.distance)
        limit = None if self.n_centers == "auto" else self.n_centers
        return grouped_central_update(theta, sizes, lam, labels, centre_cost=centre_cost(R, p, K * np.median(n_k)),
                                      min_clients=MIN_GROUP, max_groups=limit, **solve)

    def _refined(self, central, theta, sizes, weights, lam, solve, N):
        """The central problem's solution as the clients get it, and how much each block counts in the pooled
        variances (1: in full): the paper's. ``validation/experimental.py`` refines it (centre margins, linear
        shrinkage: the research record's options, ``docs/research/fedgrem-options.md``)."""
        return central, 1.0

    def _blocks(self, n_k, w0):
        """Each block's size and weight in the central problem (:func:`fedmm.algorithms.central.central_update`):
        ``(sizes, weights)`` at the pass's starting weights ``w0``; ``weights`` is None (the sizes) but
        with ``pooling_sizes="information"``.

        fedmm's, beyond the paper, whose central problem (Algorithm 1; App. B.1, eq. (6)) weighs client
        ``k`` by ``n_k``. ``"information"`` weighs each block by ``n_k w_kr^[0] R``, the information in
        ``theta_tilde_kr``: the gradient step moves a component the fraction ``w_hat_kr / w_kr^[0]`` of
        the way to its M-step (``C_eta = 1``; a component grown beyond its start goes all the way,
        :func:`fedmm.algorithms._base.step_sizes`), so clients that all pool meet at pooled EM's fixed
        point, each counting by the responsibilities ``N_kr`` it holds (in the regressions' metric, by
        ``A_kr``), where the paper's ``n_k`` counts a client holding three samples of a component as
        much as one holding three hundred. ``R`` gives the paper's ``n_k`` under equal proportions. The
        sizes are the paper's ``n_k``, raised to ``n_k (w_kr^[0] R)^2`` for a component above its equal
        share, so that no block pulls on the centre harder than the paper's ``sqrt(n_k) lambda``
        (``weight x threshold``, the Huber slope): an adversary that puts all its samples on one
        component (``w^[0] = 1``, five times an honest share in the GMM design) would otherwise drag
        the centre five times as far (that design's error at ``h = 0``: 0.34 to 0.69,
        ``docs/fedgrem.md``).

        The weights count each client by its :func:`fedmm.robust.trusted_sizes`, its claimed ``n_k``
        capped at a multiple of the median: a party's claimed size sets its own threshold, never a pull
        on the centre beyond ``sqrt(SIZE_CAP)`` median clients' (``docs/threat-model.md``).
        """
        trusted = trusted_sizes(n_k)
        if self.pooling_sizes != "information":
            return self._sizes(n_k, w0), (None if np.array_equal(trusted, n_k) else self._sizes(trusted, w0))
        share = w0 * w0.shape[1]
        return n_k[:, None] * np.maximum(share, 1.0) ** 2, trusted[:, None] * share

    def _sizes(self, n_k, w0):
        """The clients' sizes in the central problem's quadratic and thresholds: the paper's ``n_k``
        (``validation/experimental.py`` has each component's effective size at the pass's start weights ``w0``)."""
        return n_k

    def round_info(self, state):
        c = state.central
        return {"penalty": state.lam, "central_iterations": c.n_iter, "pooled_fraction": c.pooled.mean(),
                "groups": len(state.grouped.centers)}

    def diagnostics(self, state):
        c = state.central
        n_k = state.n_k[:, None]
        # One centre: every client's is its row scaled, as a view (a (K, R, p) array per result: 40 MB at K = 10^5).
        row = c.center if c.center.ndim == 2 else c.center[0] if c.center.strides[0] == 0 else None
        center = c.center * state.sigma if row is None else np.broadcast_to(row * state.sigma, (len(n_k), *row.shape))
        return Consensus(center, c.pooled, c.distance, c.threshold, state.lam * np.sqrt(n_k), state.scale_pooled,
                         np.full(n_k.shape, objective_scale(state.lam, state.lam_objective)), state.grouped.labels,
                         state.grouped.centers * state.sigma, state.grouped.main_distance, state.scale_distance,
                         np.full(n_k.shape, state.scale_dof))

    def center(self, diagnostics):
        """The largest group's centre."""
        return diagnostics.centers[0]

    def groups(self, diagnostics):
        return diagnostics.centers, diagnostics.labels

    def new_client(self, family, data, params, history, max_iter, tol):
        """A new client's components by the shrinkage FedGrEM's clients get (:func:`shrunk_client`), towards the
        consensus ``params`` at the fit's last penalty: with few rows it keeps the consensus, with many it
        approaches its own EM."""
        if "penalty" not in history:       # a private fit releases no penalty: the consensus
            return params
        return shrunk_client(family, data, params, history["penalty"][-1], max_iter, tol)

    def better_run(self, best, candidate, n_k):
        """A later start's run replaces the best so far only when the honest majority gains significantly.

        The comparison is of FedGrEM's objective per client (:func:`_penalized_loglik`), not of the
        log-likelihood (a run that pools less always fits its training data better), paired by client,
        per sample, averaged over the middle third of the differences: the ``floor(K / 3)`` largest and
        smallest are left out (the theory's ``eps < 1/3``, Theorem A.8), so no adversary decides. An
        adversary that puts all its samples on one point has an unbounded likelihood under a start that
        gives it a component, and the total would pick the start that robs the honest clients of one.
        The gain must pass a likelihood-ratio test at 5% with one component's degrees of freedom, per
        client of median size: starts are tried in order of preference, and a tie keeps the first.
        """
        gain = np.sort((_penalized_loglik(candidate) - _penalized_loglik(best)) / n_k)
        cut = len(gain) // 3
        return gain[cut:len(gain) - cut].mean() > 0.5 * chi2.ppf(0.95, best.params.theta.shape[-1]) / np.median(n_k)

    def fitted_attributes(self, result, client_ids, n_k):
        """``pooled_``, ``pooled_variances_``, ``distance_to_center_``, ``pooling_threshold_``, ``outlier_scores_``
        (:func:`outlier_scores`), ``suspected_outliers_`` (score above 1, most suspect first),
        ``center_restarts_``, ``restarted_clients_`` and ``own_fit_clients_`` (:meth:`own_fits`)."""
        c = result.diagnostics
        # Suspicion is relative to the largest group (with one centre, every client's): a client of another
        # group differs from the majority, and groups_ says that it has a group of its own.
        scores = self._outlier_scores(c, result.params, n_k)
        suspects = np.flatnonzero(scores > 1.0)
        attributes = {"pooled_": c.pooled, "pooled_variances_": c.pooled_scale, "distance_to_center_": c.distance,
                      "pooling_threshold_": c.threshold, "outlier_scores_": scores,
                      "suspected_outliers_": client_ids[suspects[np.argsort(-scores[suspects])]],
                      "center_restarts_": result.restarts, "restarted_clients_": client_ids[result.restarted],
                      "own_fit_clients_": client_ids[result.own_fit], "_free_coordinates": None}
        if self.client_server:
            attributes["groups_"] = c.labels
        return attributes

    def restart(self, params, diagnostics, attempt):
        """Clients with an unpooled component restart from their group's consensus (``center_restarts`` times at
        most)."""
        fresh = self.restarting(diagnostics, attempt)
        if fresh is None:
            return None
        # Each client restarts from its own group's centre: from the largest group's, the clients of the others
        # dragged the groups that did not restart off their data in the pass that followed.
        return params._replace(theta=np.where(fresh[:, None, None], diagnostics.center, params.theta)), fresh

    def restarting(self, diagnostics, attempt):
        fresh = ~diagnostics.pooled.all(axis=1)
        return fresh if attempt <= self.center_restarts and fresh.any() else None

    def own_fits(self, result, own, n_k, n_parameters, located_loglik):
        """Suspected outliers (:func:`outlier_scores` above 1) and clients sharing no component (:func:`sole_holders`)
        whose rows reject FedGrEM's estimate for their own fit (:func:`rejects_estimate`): a far client whose
        components pooled onto others' (a poor optimum its EM does not leave) or got components of their own
        (``docs/research/every-client.md``). Not every client is tested: a small client's own fit overfits beyond the
        chi-square's reach. Only that client's estimate changes: a party that lies moves no one else."""
        suspect = (self._outlier_scores(result.diagnostics, result.params, n_k) > 1.0) | \
            sole_holders(trusted_sizes(n_k)[:, None] * result.params.weights)   # a size is a claim
        return rejects_estimate(result.params, result.loglik, own, n_k, n_parameters, located_loglik, among=suspect)

    def may_keep_moving(self, diagnostics, params, n_k):
        """Suspected outliers (:func:`outlier_scores` above 1) with fewer than half of the components they hold rows
        of pooled, while they are fewer than a third of the clients (the theory's limit): the centre no longer follows
        them, so the others' estimates are settled whatever they do (a party that shifts its estimate every round,
        1,000 rounds instead of 33, ``docs/threat-model.md``). Their own estimates stop there."""
        held = ~empty_components(n_k, params.weights)
        apart = 2 * (diagnostics.pooled & held).sum(axis=1) < held.sum(axis=1)
        if apart.any():    # the scores (a trigamma per client and component) only where a client may be apart
            apart &= self._outlier_scores(diagnostics, params, n_k) > 1.0
        return apart if 3 * apart.sum() < len(n_k) else None

    def _outlier_scores(self, diagnostics, params, n_k):
        """Each client's :func:`outlier_scores` at ``params``, relative to the largest group: the larger of its
        means' and its variances' (:func:`variance_scores`). A party can lie in its variances alone: sums of
        squares a hundred times its data's leave its means honest (``docs/threat-model.md``, ``inflate-Sxx``)."""
        main = diagnostics.labels == 0 if self.client_server else np.ones(len(n_k), dtype=bool)
        N = n_k[:, None] * params.weights
        distance = diagnostics.scale_distance
        N_scale = N if distance.shape[1] == N.shape[1] else n_k[:, None]   # variances shared by the components
        return np.maximum(outlier_scores(diagnostics.main_distance, N, params.theta.shape[-1], reference=main),
                          variance_scores(distance, int(diagnostics.scale_dof.max()), N_scale, main))

    def keep_restart(self, before, trial):
        """Clients whose own term of FedGrEM's objective the restart raised by more than chance would.

        A likelihood-ratio test at 5% with one component's ``p`` degrees of
        freedom. On the paper's design, stuck inliers gain about 300, noise
        moves the term by a few units, and outliers lose (they fit their own
        data worse from the consensus).
        """
        gain = _penalized_loglik(trial) - _penalized_loglik(before)
        return gain > 0.5 * chi2.ppf(0.95, before.params.theta.shape[-1])


def _held_centres(on_centre, groups, weights=None):
    """Per component (R,): the groups' centres holding a client of theirs (``on_centre`` (K, R)), at ``weights[g]``."""
    return sum(on_centre[groups == g].any(axis=0) * (1 if weights is None else weights[g]) for g in np.unique(groups))


#: The fewest clients a group of :func:`fedmm.algorithms.central.grouped_central_update` holds: a single client far
#: from every centre (an outlier) stays unpooled in its nearest group rather than get a centre of its own.
MIN_GROUP = 3


def centre_cost(R, p, n_total):
    """The cost of a centre in the central objective: BIC's ``(R p / 2) log n`` (Schwarz 1978) for its ``R p``
    parameters, ``n`` the federation's samples, times
    ``R``, the objective's units (a block's quadratic ``omega_kr / 2 ||nu - theta_tilde||^2`` with ``omega_kr`` about
    ``R N_kr`` is ``R`` times the component's log-likelihood in noise units)."""
    return R * 0.5 * R * p * np.log(n_total)


def _penalized_loglik(result):
    """Each client's ``log-likelihood - sqrt(n_k) lambda sum_r w_kr ||nu_kr - nu_bar_r||`` at the end of a run.

    The central problem's penalty (Algorithm 1) in log-likelihood units: its quadratic ``n_k/2 ||nu -
    theta_tilde||^2`` stands for a log-likelihood of curvature ``n_k w_r`` (the gradient step scales component ``r``
    by ``1 / w_r``), so each component's penalty carries its weight: an empty component earns nothing by sitting at
    the centre. ``sqrt(n_k) lambda`` is ``n_k`` times the pooling threshold. Runs are compared at one ``lambda``:
    under ``penalty="sure"`` the schedule's (``Consensus.objective_scale``), since a run whose clients drifted apart
    would otherwise choose a small ``lambda`` and be charged little for it.
    """
    c = result.diagnostics
    gap = np.maximum(c.distance - c.threshold * c.objective_scale, 0.0)
    # A pooled component pays nothing, also under an infinite penalty (inf * 0 would be NaN).
    with np.errstate(invalid="ignore"):
        penalty = np.where(gap > 0, c.sqrt_n_lambda * c.objective_scale * result.params.weights * gap, 0.0)
    return result.loglik - penalty.sum(axis=1)
