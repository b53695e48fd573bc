"""Sparse FedGrEM: FedGrEM for many features of which few separate the components (issue 64).

The construction (:class:`SparseFedGrEM`) keeps FedGrEM's client step and its robust central update
unchanged and adds one coordinate-wise thresholding step on the server, after the central update: the
consensus centre at the pooled sample size's noise level, each client's deviation from it at its own.
"""

import copy
from typing import NamedTuple

import numpy as np
from threadpoolctl import ThreadpoolController

from ..families import GaussianFamily, MixtureParams, RegressionFamily
from ..protocol import Broadcast
from ..robust import trusted_sizes
from .. import _params as P
from ._base import step_sizes
from .fedgrem import Consensus, FedGrEM
from .new_client import shrunk_client

__all__ = ["SparseFedGrEM", "threshold_level", "firm_threshold", "soft_threshold_coordinates", "sparsify",
           "free_coordinates", "sure_threshold"]

THRESHOLDINGS = ("firm", "soft")
_BLAS = ThreadpoolController()
#: The over-relaxation of a regression client's proximal step (:func:`damped_gradient_step`).
RELAXATION = 1.5


def threshold_level(N, n_features, scale=1.0):
    """The threshold in noise units for an average of ``N`` rows: ``scale * sqrt(2 log d / N)``.

    ``sqrt(2 log d)`` noise standard deviations is Donoho & Johnstone's universal threshold (Biometrika
    1994): of ``d`` coordinates carrying only Gaussian noise of standard deviation ``1 / sqrt(N)``, none
    passes it with probability tending to one. Its ``sqrt(log d / n)`` order is the regularization level of
    the high-dimensional EM theory (Yi & Caramanis 2015, regularized EM, ``lambda_n ~ sqrt(log d / n)``;
    Wang, Gu, Ning & Liu 2015, truncated EM) and of CHIME (Cai, Ma & Zhang 2019). ``N`` of zero (an empty
    component) gives an infinite threshold.
    """
    N = np.asarray(N, dtype=float)
    with np.errstate(divide="ignore"):
        return scale * np.sqrt(2.0 * np.log(max(n_features, 2)) / N)


def soft_threshold_coordinates(u, tau):
    """Coordinate-wise soft-thresholding ``sign(u) (|u| - tau)_+`` (the l1 penalty's proximal map)."""
    return np.sign(u) * np.maximum(np.abs(u) - tau, 0.0)


def firm_threshold(u, tau):
    """Firm thresholding (Gao & Bruce 1997), the minimax concave penalty's thresholding rule with
    ``gamma = 2`` (Zhang 2010): 0 where ``|u| <= tau``, ``u`` unchanged where ``|u| >= 2 tau``, linear between
    (``sign(u) 2 (|u| - tau)``). Continuous, as the rounds need (a hard threshold lets a coordinate near it
    switch on and off every round), and unbiased for a strong coordinate, where the soft threshold shrinks
    every kept coordinate by ``tau``: on ten coordinates of ``tau = 0.16`` (``d = 500``, 1,000 rows) the soft
    threshold's bias alone is 0.5, the support oracle's whole error 0.3."""
    a = np.abs(u)
    return np.where(a >= 2.0 * tau, u, np.sign(u) * np.clip(2.0 * (a - tau), 0.0, None))


def sure_threshold(z, thresholding="firm", n_grid=64):
    """The threshold of each row of ``z`` (..., d), a vector observed with unit noise per coordinate, that
    minimizes Stein's unbiased estimate of its risk under firm or soft thresholding, over ``[0, sqrt(2 log d)]``:
    SureShrink (Donoho & Johnstone 1995, JASA 90), 0 where the signal is dense (no coordinate thresholded), up to
    the universal threshold where it is sparse. Stein's estimate (Stein 1981, Ann. Statist. 9) of the risk of
    ``eta(z)`` is ``d + ||eta(z) - z||^2 + 2 sum_j (eta_j'(z_j) - 1)``: ``d + sum_{|z_j| < t} (z_j^2 - 2)`` plus, firm
    (:func:`firm_threshold`, slope 2 on ``[t, 2t]``), ``sum_{t <= |z_j| < 2t} ((|z_j| - 2t)^2 + 2)``, or soft,
    ``sum_{|z_j| >= t} t^2``. Where the signal is too sparse for SURE to see (``(||z||^2 - d) / d <= log2(d)^(3/2)
    / sqrt(d)``, their hybrid rule) the universal threshold ``sqrt(2 log d)``. Returns ``t`` (...,)."""
    d = z.shape[-1]
    universal = np.sqrt(2.0 * np.log(max(d, 2)))
    t = np.linspace(0.0, universal, n_grid)[:, None]
    a = np.abs(z.reshape(-1, d))[:, None, :]                              # (rows, 1, d) against t (n_grid, 1)
    below = a < t
    if thresholding == "firm":
        band = ~below & (a < 2.0 * t)
        risk = np.where(below, a * a - 2.0, 0.0) + np.where(band, (a - 2.0 * t) ** 2 + 2.0, 0.0)
    else:
        risk = np.where(below, a * a - 2.0, t * t)
    sparse = ((z * z).sum(axis=-1) - d) / d <= np.log2(max(d, 2)) ** 1.5 / np.sqrt(d)
    return np.where(sparse, universal, t[risk.sum(axis=-1).argmin(axis=1), 0].reshape(z.shape[:-1]))


def sparsify(theta, center, labels, pooled, N, sigma, threshold_scale=1.0, thresholding="firm", about="origin",
             own=True, trusted=None):
    """The sparse step: ``m + S((c_r - m) / sigma_r, tau_gr) sigma_r + S((theta_kr - c_r) / sigma_r, tau_kr) sigma_r``,
    ``m`` the origin (``about="origin"``) or the centre's mixture mean ``sum_r N_r c_r / sum_r N_r`` (``"mean"``).

    Parameters
    ----------
    theta : ndarray of shape (K, R, d)
        Each client's own estimate ``theta_tilde_kr``, its gradient step (``own``), or the central update's solution
        ``nu_kr``, whose group test has chosen the deviations that stand (fitting units).
    center : ndarray of shape (K, R, d)
        Each client's group's centre ``c_r`` (fitting units).
    labels : ndarray of shape (K,)
        Each client's group.
    pooled : ndarray of shape (K, R), bool
        Whose component sits on its centre: the centre averages those clients' rows.
    N : ndarray of shape (K, R)
        Each client's effective component sizes ``N_kr = n_k w_kr``.
    sigma : ndarray of shape (R, s)
        The noise scale (:func:`fedmm.algorithms.fedgrem.noise_scale`), ``s`` 1 or ``d``.
    own : bool, default=True
        Whether ``theta`` are the clients' own steps (else the central update's solution).
    trusted : ndarray of shape (K, R), optional
        The sizes the centre counts each client by (:func:`fedmm.robust.trusted_sizes`); ``N`` by default.

    Returns
    -------
    theta : ndarray of shape (K, R, d)
    center : ndarray of shape (K, R, d)
        The thresholded centres.

    The centre's threshold ``tau_gr`` is :func:`threshold_level` at ``N_gr``, the (trusted) rows of the group's
    clients pooled onto it (their own size where none is), a client's deviation's ``tau_kr`` at its own ``N_kr``:
    each at the noise level of the average it is (a size is a claim, but a client's deviation is its own estimate:
    a party claiming more rows moves no one else). A client's own deviations take the universal threshold of all
    ``K R d`` coordinates thresholded at once (``sqrt(2 log(K R d) / N_kr)``): of that many noise coordinates none
    passes it, so that clients alike sit on their centre (at ``sqrt(2 log d / N_kr)`` the largest honest-client error on
    ``validation/sparse.py``'s design at ``d = 100`` grew 0.330 -> 0.360, ``docs/research/sparse.md``); the
    central update's each its own vector's ``sqrt(2 log d / N_kr)``.
    """
    rule = firm_threshold if thresholding == "firm" else soft_threshold_coordinates
    d = theta.shape[-1]
    N_centre = np.empty_like(N)
    trusted = N if trusted is None else trusted
    for g in np.unique(labels):
        members = labels == g
        size = (trusted[members] * pooled[members]).sum(axis=0)
        N_centre[members] = np.maximum(size, trusted[members])
    # The reference: the origin, or the centre's mixture mean sum_r N_r c_r / sum_r N_r (per client's group).
    origin = 0.0 if about == "origin" else \
        np.einsum("kr,krd->kd", N_centre / N_centre.sum(axis=1, keepdims=True), center)[:, None, :]
    c = origin + rule((center - origin) / sigma, threshold_level(N_centre, d, threshold_scale)[..., None]) * sigma
    tau = threshold_level(N, d * N.size if own else d, threshold_scale)
    deviation = rule((theta - center) / sigma, tau[..., None]) * sigma
    return c + deviation, c


def free_coordinates(center, about, n_sparse):
    """(R,) the free coordinates of each component of a thresholded centre (R, p), which BIC counts: on each
    coordinate every distinct value among the components counts once, shared by the components that take it, and
    the origin (``about="origin"``, on the ``n_sparse`` thresholded coordinates) not at all. The lasso's degrees of
    freedom are its nonzero coefficients (Zou, Hastie & Tibshirani 2007, Ann. Statist. 35, Thm. 1), which the BIC
    of penalized model-based clustering counts (Pan & Shen 2007, JMLR 8, their modified BIC); counted densely, ``R d``
    coordinates a centre charged a second component ``d log n``: at ``d = 500`` BIC chose one component for
    ``validation/sparse.py``'s two in every seed (``docs/research/sparse.md``)."""
    share = 1.0 / (center[:, None, :] == center[None, :, :]).sum(axis=1)
    if about == "origin":
        share[:, :n_sparse][center[:, :n_sparse] == 0.0] = 0.0
    return share.sum(axis=1)


def fitting_family(family):
    """The family the sparse rounds fit with: ``family`` itself, but for a regression the plain gradient step of the
    paper's MoR (FedGrEM Sec. 3.4, App. E.5; truncated gradient EM, Wang, Gu, Ning & Liu 2015, Sec. 3), without the
    dense fits' preconditioner ``(A_r / N_r)^{-1}`` (:meth:`fedmm.families.RegressionFamily.gradient_step`), which
    is singular with fewer rows ``N_r`` than coefficients, and with the Euclidean norm (in noise units) in the
    central problem (:meth:`fedmm.families.RegressionFamily.central_metric`: None without it)."""
    if not isinstance(family, RegressionFamily) or not family.precondition:
        return family
    plain = copy.copy(family)
    plain.precondition = False
    return plain


def damped_gradient_step(stats, theta, eta, n_k, relaxation=None):
    """A regression client's step: ``theta + eta (N_r / n_k) c (G_r + I)^{-1} (b_r / N_r - G_r theta_r)``, ``G_r =
    A_r / N_r``, ``c`` the ``relaxation`` (:data:`RELAXATION`); per-feature units, where ``E[G_r] = I`` under the
    paper's design.

    It is the proximal-point M-step (Chretien & Hero 2000: the maximizer of Q-hat minus
    ``N_r / 2 ||theta' - theta||^2``) over-relaxed by ``c``: at ``G_r = I``, ``c / 2`` of the paper's gradient step
    (FedGrEM Algorithm 1 with the MoR gradient of App. E.5, ``(b_r - A_r theta_r) / n_k``), and its fixed points
    are the gradient step's. It exists with fewer rows than coefficients, unlike the dense fits' ``G_r^{-1}``
    (:meth:`fedmm.families.RegressionFamily.gradient_step`), and it cannot overshoot where the plain step does: a
    direction of ``G_r``'s eigenvalue ``g`` moves ``eta w_hat c g / (g + 1) < c <= 2`` of its distance to the
    M-step (``eta w_hat <= C_eta <= 1``), where the plain step's ``eta w_hat g`` reaches ``(1 + sqrt(p / N_r))^2``,
    7 at ``p = 200``, ``N_r = 75``: an unpooled client's rounds then diverge (measured). ``c = 1.5`` contracts every
    direction with ``g >= 1/2`` by a factor 0.5 or better per round up to ``g = 7`` (``c = 2``: 0.75 there).
    """
    relaxation = RELAXATION if relaxation is None else relaxation
    residual = stats.b - np.einsum("krij,krj->kri", stats.A, theta)
    p = theta.shape[-1]
    # N_r I, and a ridge as the family's own solves have (RegressionFamily._solve), so that an empty component stays
    # finite (it does not move: its residual is 0).
    ridge = stats.N + 1e-8 * (np.trace(stats.A, axis1=-2, axis2=-1) / p + 1.0)
    with _BLAS.limit(limits=1, user_api="blas"):   # many small solves: threads cost 8x on a busy machine (measured)
        step = np.linalg.solve(stats.A + ridge[..., None, None] * np.eye(p), residual[..., None])[..., 0]
    return theta + eta[..., None] * relaxation * stats.N[..., None] * step / n_k[:, None, None]


def sparse_coordinates(family, p):
    """How many of the ``p`` leading parameter coordinates the sparse step thresholds: all of a Gaussian mean's,
    a regression's coefficients but not its intercept (the last coordinate with ``fit_intercept``)."""
    return p - 1 if isinstance(family, RegressionFamily) and family.fit_intercept else p


#: FedGrEM's account of its last central update (:class:`fedmm.algorithms.fedgrem.Consensus`) with the thresholded
#: centres, the family, and ``n_sparse``, the leading coordinates the sparse step thresholds
#: (:func:`sparse_coordinates`).
SparseConsensus = NamedTuple("SparseConsensus", [*Consensus.__annotations__.items(), ("family", object),
                                                 ("n_sparse", int)])


class SparseState:
    """The server between rounds: FedGrEM's state and the last sparse step's centres (K, R, d) and groups'
    centres (G, R, d), in the fitting units."""

    __slots__ = ("inner", "center", "centers")

    def __init__(self, inner, center=None, centers=None):
        self.inner, self.center, self.centers = inner, center, centers


class SparseFedGrEM(FedGrEM):
    __doc__ = f"""Sparse FedGrEM (``method="sparse-fedgrem"``): FedGrEM when few of many features separate the
    components (``docs/sparse.md``), for Gaussian mixtures and mixtures of regressions.

    The construction. FedGrEM's clients (E-step, one gradient step; Algorithm 1) and its robust central update
    (the group-lasso problem of Algorithm 1 / App. B.1 eq. (6), its penalty, reweighting and groups) are
    unchanged, so outlier clients stay as far from the honest ones as in FedGrEM. After the central update
    the server thresholds the result coordinate-wise, in noise units (:func:`fedmm.algorithms.fedgrem.noise_scale`):

    - each centre ``c_r`` at ``tau = threshold_scale * sqrt(2 log d / N_r)``, ``N_r`` the rows of the clients
      pooled onto it (:func:`threshold_level`): an l1-type penalty on the global estimator, the first of the
      FedGrEM paper's two suggestions for sparse parameters (App. D);
    - each client's deviation from it in its own gradient step, ``theta_tilde_kr - c_r``, at the same level for its
      own ``N_kr = n_k w_kr`` (over the ``K R d`` coordinates thresholded at once): the paper's second suggestion
      (App. D: the one-step local estimator truncated coordinate-wise, the central update kept as it is), applied
      to what is the client's own, its deviation from the centre, so that its threshold is its own sample size's
      and the centre's the federation's. Not the central update's ``nu_kr - c_r``: the group lasso tests a whole
      ``d``-vector, whose ``d`` noise coordinates set its threshold, and pooled a deviation on a few features however
      strong (one component, each client moved ``N(0, 0.5^2)`` on 20 of 200 features: every client on the centre,
      its largest error 2.5, and ``select_n_components`` chose 3 or 4 components; now 1.3 and 1);

    and broadcasts ``S(c_r) + S(theta_tilde_kr - c_r)``, at which the clients take their next E-step. This is truncated
    or regularized EM (Wang, Gu, Ning & Liu 2015, a truncation after each gradient M-step; Yi & Caramanis 2015,
    a regularized M-step at level ``sqrt(log d / n)``) with the federation's pooled size where the clients
    pool. Thresholding the clients' estimates before pooling (each at its own ``sqrt(log d / n_kr)``) would
    leave the centre the average of ten biased, ten times noisier truncations; here the noise level of each
    threshold is that of the average it acts on.

    What is sparse (``sparse_about``). By default the components' contrasts from their mixture mean
    ``m = sum_r N_r c_r / sum_r N_r``: the components differ from the overall mean on few features, an
    assumption that rescaling or shifting features does not change, so the fit stays equivariant (fedmm fits
    in standard units, ``docs/units.md``). ``m`` itself is dense (not thresholded: an outlier client that
    moved the pooled moments shifts every feature a little, a dense signal), and its error, about
    ``sqrt(d / n)`` for ``n`` honest rows in all, is part of the means' error. ``sparse_about="origin"``:
    the means themselves are sparse about the origin of the fitting units, under ``covariance_type=
    "identity"`` (no units map: unit variance is the model) the data's zero: the model of Wang et al. (2015),
    ``x = z beta + noise`` with ``beta`` sparse, and of issue 64's design; there the dense mean's error is
    gone (``docs/research/sparse.md``).

    Parameters
    ----------
    threshold_scale : float > 0, default=1.0
        ``c`` in ``tau = c sqrt(2 log d / N)`` (noise units): 1 is the universal threshold.
    thresholding : {{"firm", "soft"}}, default="firm"
        "firm": firm thresholding (Gao & Bruce 1997; the MCP's rule, Zhang 2010), no bias on a coordinate
        above ``2 tau`` (:func:`firm_threshold`); "soft": the l1 proximal map, which shrinks every kept
        coordinate by ``tau``.
    sparse_about : {"mean", "origin"}, default="mean"
        What is sparse: "mean", the components' contrasts from the centre's mixture mean (equivariant to
        shifting and rescaling features); "origin", the means about the origin of the fitting units, the
        data's zero under ``covariance_type="identity"`` (not equivariant to shifts: the model says where 0 is).
    C_eta, eta_rule, penalty, penalty_params, center_restarts, pooling_sizes, pool_variances, central_tol,
    central_max_iter, n_centers, reweighting, participation, dropout
        FedGrEM's (:class:`~fedmm.algorithms.fedgrem.FedGrEM`). Variances are FedGrEM's, at the central
        update's means (before the threshold).

    Mixtures of regressions (Stadler, Buhlmann & van de Geer 2010, Sec. 2: ``y | x, z = r ~ N(x^T beta_r, sigma_r^2)``
    with sparse ``beta_r``). The coefficients are thresholded as the means are, in noise units ``sigma_r`` (the
    component's noise sd), each at ``sqrt(2 log d / N)``; the intercept never. What is sparse are the coefficients
    themselves (``sparse_about`` is the Gaussian mixtures'): a feature without effect has coefficient 0 whatever
    its units, so the fit stays equivariant to shifting and rescaling each feature and ``y``. For that the fit's
    units scale each feature (``per_feature_units``; whitening, the dense fits' units, mixes a sparse vector across
    every feature: :meth:`fedmm.families.RegressionFamily.units`), and the clients take the plain gradient step
    of the paper's MoR (Sec. 3.4, App. E.5: ``(b_r - A_r theta_r) / n_k``, which assumes ``E[x x^T] = I``, here
    per feature), the truncated gradient EM of Wang, Gu, Ning & Liu (2015, Sec. 3, their MoR example): the
    dense fits' preconditioner ``(A_r / N_r)^{-1}`` does not exist with fewer rows than features
    (:func:`fitting_family`). Its default start is :func:`fedmm.algorithms.sparse_start.regression_screened_start`.

    Its default start (``init="auto"``) is ``"screened"`` (:func:`fedmm.initialization.screened_start`) where the
    covariances keep the features' relative variances (identity, spherical): the dense starts' k-means and EM
    see mostly noise at ``n < d`` and from ``d = 2000`` on the issue's design no longer find the clusters;
    FedGrEM's ``"pooled-and-local"`` elsewhere.

    Fitted attributes: FedGrEM's, with ``center_`` and ``centers_`` the thresholded centres, plus
    ``support_`` (n_features,), bool: the features on which some component of the largest group's centre
    differs from the origin of the fitting units.
    """

    name = "sparse-fedgrem"
    models = ("gmm", "mor")
    #: The fit's units scale each feature, never mix them (:meth:`fedmm.families.RegressionFamily.units`).
    per_feature_units = True
    default_init = "screened"
    _parameter_constraints = {**FedGrEM._parameter_constraints,
                              "threshold_scale": P.real(0.0, np.inf, low_open=True, high_open=True),
                              "thresholding": P.one_of(*THRESHOLDINGS),
                              "sparse_about": P.one_of("mean", "origin")}

    def __init__(self, threshold_scale=1.0, thresholding="firm", sparse_about="mean", C_eta=1.0, eta_rule="safeguarded",
                 penalty="sure-floored", penalty_params=None, center_restarts=1, pooling_sizes="information",
                 pool_variances=True, central_tol=1e-10, central_max_iter=1000, n_centers="auto", reweighting=True,
                 participation=1.0, dropout=0.0):
        super().__init__(C_eta, eta_rule, penalty, penalty_params, center_restarts, pooling_sizes, pool_variances,
                         central_tol, central_max_iter, n_centers, reweighting, participation, dropout)
        self.threshold_scale = threshold_scale
        self.thresholding = thresholding
        self.sparse_about = sparse_about

    def local_update(self, family, stats, state, n_k):
        if not isinstance(family, RegressionFamily):
            return super().local_update(family, stats, state, n_k)
        eta = step_sizes(state.w0, stats, n_k, self.C_eta, self.eta_rule)
        theta = damped_gradient_step(stats, state.params.theta, eta, n_k)
        return MixtureParams(stats.N / n_k[:, None], theta, family.update_scale(stats, theta))

    def server_start(self, family, start, n_k):
        if not isinstance(family, (GaussianFamily, RegressionFamily)):
            raise ValueError("method='sparse-fedgrem' fits Gaussian mixtures and mixtures of regressions only "
                             f"(FederatedGaussianMixture, FederatedMixtureRegression); {type(family).__name__}'s "
                             "sparse mixtures are not supported: choose another method.")
        broadcast, inner = super().server_start(fitting_family(family), start, n_k)
        return broadcast, SparseState(inner)

    def server_step(self, messages, state, t):
        broadcast, inner = super().server_step(messages, state.inner, t)
        c = super().diagnostics(inner)
        params = broadcast.params
        q = sparse_coordinates(inner.family, params.theta.shape[-1])
        trust = (trusted_sizes(messages.n) / messages.n)[:, None]
        # A regression's deviations are the central update's: its damped step is not its M-step's unit noise near p
        # rows, and thresholded from it the fits were slower and worse (docs/research/sparse.md).
        own = not isinstance(inner.family, RegressionFamily)
        theta, center = sparsify((messages.theta if own else params.theta)[..., :q], c.center[..., :q], c.labels,
                                 c.pooled, messages.stats.N, inner.sigma, self.threshold_scale, self.thresholding,
                                 self._about(inner.family), own, messages.stats.N * trust)
        theta = np.concatenate([theta, params.theta[..., q:]], axis=-1)   # an intercept as the central update left it
        center = np.concatenate([center, c.center[..., q:]], axis=-1)
        centers = np.stack([center[c.labels == g][0] if (c.labels == g).any() else c.centers[g]
                            for g in range(len(c.centers))])
        return Broadcast(params._replace(theta=theta)), SparseState(inner, center, centers)

    def new_client(self, family, data, params, history, max_iter, tol):
        """A new client of a Gaussian mixture: FedGrEM's (:func:`~fedmm.algorithms.new_client.shrunk_client`, its
        E-step and M-step on its own rows alternated with the shrinkage towards the consensus ``params``), with its
        deviation thresholded coordinate by coordinate at SureShrink's threshold (:func:`sure_threshold`) in its own
        rows' noise units (``1 / sqrt(N_r)`` a coordinate): the universal ``sqrt(2 log d / N_r)``
        where the deviation is sparse, none where it is dense, in place of FedGrEM's group step. The fit's penalty
        ``lambda`` is a dense deviation's, whose ``d`` noise coordinates make its norm: a deviation on a few features
        did not clear it, and the group step kept the consensus where the client's own sparse EM did far better
        (``d = 500``, 300 rows, 1 from the consensus: 1.00 against 0.52; now 0.64). The universal threshold alone
        shrank a shift of every feature in the firm rule's band until one component took every row (an outside
        audit: 15.8 from the truth, the group step 2.7; now 2.7). A regression's new client is FedGrEM's: its own
        M-step's coefficients are not that noise near ``p`` rows, and thresholding them lost the consensus
        (``docs/research/sparse.md``)."""
        if isinstance(family, RegressionFamily) or "penalty" not in history:   # a private fit: no penalty released
            return super().new_client(family, data, params, history, max_iter, tol)
        rule = firm_threshold if self.thresholding == "firm" else soft_threshold_coordinates

        def coordinates(u, N):
            z = u * np.sqrt(N)[..., None]                    # the own mean's unit noise per coordinate
            with np.errstate(invalid="ignore"):
                v = rule(z, sure_threshold(z, self.thresholding)[..., None]) / np.sqrt(N)[..., None]
            return np.where(N[..., None] > 0, v, 0.0)        # an empty component: the consensus

        return shrunk_client(family, data, params, history["penalty"][-1], max_iter, tol, coordinates)

    def _about(self, family):
        """What is sparse: the coefficients themselves for regressions, ``sparse_about`` for Gaussian mixtures."""
        return "origin" if isinstance(family, RegressionFamily) else self.sparse_about

    def round_info(self, state):
        info = super().round_info(state.inner)
        family = state.inner.family
        q = sparse_coordinates(family, state.centers.shape[-1])
        info["support_size"] = int(self._support(state.centers[0][:, :q], self._about(family)).sum())
        return info

    def diagnostics(self, state):
        c = super().diagnostics(state.inner)._replace(center=state.center, centers=state.centers)
        return SparseConsensus(*c, state.inner.family, sparse_coordinates(state.inner.family, c.center.shape[-1]))

    def fitted_attributes(self, result, client_ids, n_k):
        attributes = super().fitted_attributes(result, client_ids, n_k)
        c = result.diagnostics
        about = self._about(c.family)
        attributes["support_"] = self._support(c.centers[0][:, :c.n_sparse], about)
        # What BIC counts (FedGrEM.distinct_components): each group's centre's free coordinates, and each client's
        # coordinates off its centre (the sparse step's deviation).
        centres = np.array([free_coordinates(centre, about, c.n_sparse) for centre in c.centers])
        attributes["_free_coordinates"] = (centres, (result.params.theta != c.center).sum(axis=-1))
        return attributes

    @staticmethod
    def _support(center, about):
        """(d,) the features on which some component of ``center`` (R, d) differs from the reference: from 0
        (``about="origin"``), or from the others (``"mean"``: off the support all sit on their mixture mean)."""
        return (center != 0.0).any(axis=0) if about == "origin" else (center != center[:1]).any(axis=0)
