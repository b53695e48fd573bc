"""FedGrEM: federated gradient EM with a robust central update (FedGrEM Sec. 2.3, Algorithm 1).

Each round, on every client: the E-step, ``w_hat_r = N_r / n_k``, and one gradient
step ``theta_tilde = theta + eta * grad Q-hat``. On the server: the central
update (:func:`fedmm.central.central_update`) with penalty ``lambda_t``, which
pools clients near the consensus onto it and lets far ones (heterogeneous or
outlier clients) keep their own estimate. Only parameters cross the boundary.
"""

from numbers import Real

import numpy as np
from scipy.stats import chi2

from ..central import central_update
from ..families import MixtureParams
from ._base import Algorithm, fit_weights, grem_update, run_rounds

PENALTIES = ("paper", "theory")
POOLING_SIZES = ("client", "component")


def penalty_schedule(penalty, penalty_params, p, K, n):
    """``t -> lambda_t`` for ``t = 1, 2, ...``.

    - ``"paper"`` (App. B.1): ``lambda_0 = 1``, ``lambda_t = kappa lambda_{t-1} + C sqrt(p + log K)``
      with ``kappa = 0.1``, ``C = 2`` (override with ``penalty_params``: ``lambda0``, ``kappa``, ``C``);
    - ``"theory"`` (App. A, Assumption A.7): ``lambda_0 = (15/119) sqrt(n) (r_w + r_theta)``,
      ``lambda_t = kappa0 lambda_{t-1} + 15 sqrt(n) (W + 2 eta_bar E1)``, with every constant
      (``kappa0``, ``r_w``, ``r_theta``, ``W``, ``E1``, ``eta_bar``) given in ``penalty_params``
      (they involve unknown absolute constants; ``n`` is the mean client size);
    - a number: constant ``lambda`` (``inf`` pools everything: gradient FedEM);
    - a callable: ``lambda_t = penalty(t)``.
    """
    params = dict(penalty_params or {})
    if callable(penalty):
        return penalty
    if isinstance(penalty, Real) and not isinstance(penalty, bool):
        if penalty < 0:
            raise ValueError(f"A constant penalty must be >= 0, got {penalty}.")
        return lambda t: float(penalty)
    if penalty == "paper":
        lam0, kappa = params.pop("lambda0", 1.0), params.pop("kappa", 0.1)
        increment = params.pop("C", 2.0) * np.sqrt(p + np.log(K))
    elif penalty == "theory":
        needed = ("kappa0", "r_w", "r_theta", "W", "E1", "eta_bar")
        missing = [k for k in needed if k not in params]
        if missing:
            raise ValueError(f"penalty='theory' needs penalty_params with {list(needed)}; missing {missing}. "
                             "(fedmm.theory computes them for the GMM and MoR examples.)")
        kappa = params.pop("kappa0")
        lam0 = 15.0 / 119.0 * np.sqrt(n) * (params.pop("r_w") + params.pop("r_theta"))
        increment = 15.0 * np.sqrt(n) * (params.pop("W") + 2.0 * params.pop("eta_bar") * params.pop("E1"))
    else:
        raise ValueError(f"penalty must be one of {PENALTIES} (or 'auto' in the estimators), a number >= 0 or a "
                         f"callable of t; got {penalty!r}.")
    if params:
        raise ValueError(f"Unknown penalty_params for penalty={penalty!r}: {sorted(params)}.")
    # lambda_t = kappa^t lambda_0 + increment (1 - kappa^t) / (1 - kappa), the recursion unrolled.
    return lambda t: kappa ** t * lam0 + increment * (t if kappa == 1 else (1 - kappa ** t) / (1 - kappa))


def noise_scale(scale):
    """``sigma_r``, the noise scale of every component (R, s): the root of the clients' median variance.

    The central problem (Algorithm 1) is stated for unit-variance noise: its
    quadratic ``n_k/2 ||nu_k - theta_k||^2`` is the information in ``n_k``
    unit-variance samples, and its threshold ``lambda / sqrt(n_k)`` a number of
    noise standard deviations. With estimated variances fedmm solves it on
    ``theta / sigma_r`` (per coordinate for diagonal covariances), i.e. with
    threshold ``lambda sigma_r / sqrt(n_k)`` in the data's units, which makes
    the pooling decision independent of the data's units and leaves the
    paper's problem unchanged when ``sigma_r = 1``. The median over clients
    keeps an outlier client's variances from setting the unit.
    """
    return np.sqrt(np.median(scale, axis=0))


def pool_variances(scale, N, pooled):
    """Components pooled onto the centre share one variance: the pooled M-step at the common mean.

    Client ``k`` holds ``scale_kr``, the maximizer of its Q-hat at ``nu_kr``
    (``RSS_kr / N_kr``); for the clients ``P_r`` whose component ``r`` sits at
    ``nu_bar_r`` the pooled maximizer is ``sum_{P_r} N_kr scale_kr / sum_{P_r} N_kr``,
    what pooled EM computes for them. Clients send ``N_kr scale_kr`` and
    ``N_kr`` (``n_k w_kr``): parameters and sizes, no data. Unpooled
    components, outliers among them, keep their own.
    """
    weight = np.where(pooled, N, 0.0)[..., None]                                  # (K, R, 1)
    total = weight.sum(axis=0)
    # Shares first: a nearly empty component's N of 1e-300 times a variance would underflow to 0.
    share = weight / np.where(total > 0, total, 1.0)
    return np.where(pooled[..., None] & (total > 0), (share * scale).sum(axis=0), scale)


class FedGrEM(Algorithm):
    """FedGrEM (``method="fedgrem"``).

    Parameters
    ----------
    C_eta, eta_rule
        Step sizes (:func:`fedmm.algorithms._base.step_sizes`).
    penalty, penalty_params
        The penalty schedule (:func:`penalty_schedule`).
    pooling_sizes : {"client", "component"}
        Sizes weighting the central problem: ``n_k`` (the paper) or each
        component's effective size ``n_k w_kr R``.
    center_restarts : int
        fedmm's fix for poor local starts: after the rounds end, clients with
        a component that was not pooled restart from the consensus (their
        parameters set to the centre, uniform proportions) and FedGrEM runs
        again; repeated up to this many times while some client is unpooled.
        A restart is kept only for clients whose own term of FedGrEM's
        objective (log-likelihood minus central penalty) it raises
        significantly (likelihood-ratio test at 5%, one component's degrees of
        freedom): an inlier stuck in a poor local optimum gains hundreds of
        nats and is pooled, an outlier fits its own data worse from the
        consensus and keeps its first estimate, so robustness is kept.
        0 gives the paper's algorithm.
    pool_variances : bool
        Components pooled onto the centre also share their variance
        (:func:`pool_variances`); False keeps every client's own, as the
        paper's identity-covariance model never needs to decide.
    central_tol, central_max_iter
        Tolerance and cap of the central problem's alternating minimization.
    """

    per_client = False
    # The paper starts from aligned local EM (App. B, C.1); fedmm's default is the trimmed pooled start, which
    # needs no client to fit every component alone (docs/units.md, "Starts"). init="local-em" gives the paper's.
    default_init = "trimmed-pooled"
    stop_on = "parameter_change"
    # The central update trades likelihood for pooling: no objective climbs every round. Its clients' gradient
    # steps still contract (C_eta < 2 with the safeguarded or preconditioned step).
    ascent = False

    def __init__(self, C_eta=1.0, eta_rule="safeguarded", penalty="paper", penalty_params=None, center_restarts=1,
                 pooling_sizes="client", pool_variances=True, central_tol=1e-10, central_max_iter=1000):
        super().__init__(C_eta, eta_rule)
        self.pool_variances = pool_variances
        if pooling_sizes not in POOLING_SIZES:
            raise ValueError(f"pooling_sizes must be one of {POOLING_SIZES}, got {pooling_sizes!r}.")
        self.pooling_sizes = pooling_sizes
        self.penalty = penalty
        self.penalty_params = penalty_params
        self.center_restarts = center_restarts
        self.central_tol = central_tol
        self.central_max_iter = central_max_iter

    def start(self, params, n_k):
        super().start(params, n_k)
        self.n_k = n_k
        self.t = 0
        self.lam = penalty_schedule(self.penalty, self.penalty_params, params.theta.shape[-1], len(n_k), n_k.mean())
        self.central = None

    def step(self, family, stats, params, n_k):
        self.t += 1
        local = grem_update(family, stats, params, self.step_sizes(stats, n_k), n_k)  # client side
        self.sigma = noise_scale(local.scale)                                     # server side
        self.central = self._central(local, self.lam(self.t))
        nu = self.central.nu * self.sigma
        # The variances that fit the parameters the clients now hold (left at theta_tilde, a small variance on
        # a component the server moved makes the next E-step collapse), pooled where the means are.
        scale = family.update_scale(stats, nu)
        if self.pool_variances and family.scale_per_component:
            scale = pool_variances(scale, stats.N, self.central.pooled)
        return local._replace(theta=nu, scale=scale)

    def _central(self, params, lam):
        """The central problem on ``theta / sigma`` (noise units), weighted by :meth:`_sizes`."""
        return central_update(params.theta / self.sigma, self._sizes(params.weights), lam, tol=self.central_tol,
                              max_iter=self.central_max_iter)

    def _sizes(self, weights):
        """``n_k``, or with ``"component"`` each component's effective size ``n_k w_kr`` (the information in
        ``theta_tilde_kr``) times ``R``, so that uniform proportions give the paper's ``n_k``."""
        if self.pooling_sizes == "component":
            return self.n_k[:, None] * weights * weights.shape[1]
        return self.n_k

    def round_info(self):
        c = self.central
        return {"penalty": self.lam(self.t), "central_iterations": c.n_iter, "pooled_fraction": c.pooled.mean()}

    def final_state(self):
        c = self.central
        return {"center": c.center * self.sigma, "pooled": c.pooled, "distance": c.distance, "threshold": c.threshold,
                "sqrt_n_lambda": self.lam(self.t) * np.sqrt(self.n_k)[:, None], "center_restarts": 0,
                "restarted": np.array([], dtype=int)}

    def run(self, family, data, start, max_iter, tol):
        result = run_rounds(self, family, data, start, max_iter, tol)
        for restart in range(1, self.center_restarts + 1):
            candidates = ~result.state["pooled"].all(axis=1)
            if not candidates.any():
                break
            theta = np.where(candidates[:, None, None], result.state["center"], result.params.theta)
            # Proportions that fit the client's data under the consensus components, so that its step
            # sizes C_eta / w_hat match the proportions it will have.
            weights = fit_weights(family, data, result.params._replace(theta=theta), candidates, max_iter, tol)
            trial = run_rounds(self, family, data, MixtureParams(weights, theta, result.params.scale), max_iter, tol)
            # Keep a client's restart only where it raised the client's own term of FedGrEM's
            # objective (log-likelihood minus central penalty) by more than chance would: a
            # likelihood-ratio test at 5% with one component's p degrees of freedom. On the
            # paper's design, stuck inliers gain about 300, noise moves the term by a few units,
            # and outliers lose (they fit their own data worse from the consensus).
            gain = _penalized_loglik(trial) - _penalized_loglik(result)
            keep = ~candidates | (gain > 0.5 * chi2.ppf(0.95, start.theta.shape[-1]))
            if not keep[candidates].any():
                break
            passes = [result, trial]
            if not keep.all():  # some restarts were rejected: settle the mixed state jointly
                passes.append(run_rounds(self, family, data, trial.params.where(keep, result.params), max_iter, tol))
            final = passes[-1]
            result = final._replace(n_iter=sum(p.n_iter for p in passes),
                                    history={k: np.concatenate([p.history[k] for p in passes]) for k in final.history},
                                    state={**final.state, "center_restarts": restart,
                                           "restarted": np.flatnonzero(candidates & keep)})
        return result

def _penalized_loglik(result):
    """Each client's ``log-likelihood - sqrt(n_k) lambda sum_r w_kr ||nu_kr - nu_bar_r||`` at the end of a run.

    The central problem's penalty (Algorithm 1) in log-likelihood units: its
    quadratic ``n_k/2 ||nu - theta_tilde||^2`` stands for a log-likelihood of
    curvature ``n_k w_r`` (the gradient step scales component ``r`` by
    ``1 / w_r``), so each component's penalty carries its weight. An empty
    component therefore earns nothing by sitting at the centre.
    ``sqrt(n_k) lambda`` is ``n_k`` times the pooling threshold.
    """
    state = result.state
    gap = np.maximum(state["distance"] - state["threshold"], 0.0)
    return result.loglik - (state["sqrt_n_lambda"] * result.params.weights * gap).sum(axis=1)
