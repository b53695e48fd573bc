"""FedGrEM's robust central update, on the server (FedGrEM Algorithm 1; App. B.1, eq. (6)).

For every component ``r`` the server solves

    min_{nu_1..nu_K, nu_bar}  sum_k  n_k/2 ||nu_k - theta_k||^2 + sqrt(n_k) lambda ||nu_k - nu_bar||_2

from the clients' locally updated parameters ``theta_k``. The paper states it
for equal ``n_k = n``; fedmm weights client ``k`` by its own ``n_k``, which is
the same problem when sizes are equal and lets a large client count for more.

With ``nu_k = nu_bar + Delta_k`` (eq. (6)), the two blocks have closed forms:

- ``nu_bar = sum_k n_k (theta_k - Delta_k) / sum_k n_k`` (the paper: the plain mean);
- ``Delta_k = (1 - (lambda / sqrt(n_k)) / ||theta_k - nu_bar||)_+ (theta_k - nu_bar)``,
  a group soft-threshold: a client within ``lambda / sqrt(n_k)`` of the centre
  is pooled onto it exactly (``Delta_k = 0``), one farther out keeps all but
  ``lambda / sqrt(n_k)`` of its distance.

Profiling ``Delta`` out leaves ``nu_bar`` as a multivariate Huber estimate of
location of the ``theta_k``,

    nu_bar = argmin sum_k H_k(||theta_k - nu_bar||),   H_k(u) = n_k u^2 / 2             if u <= lambda / sqrt(n_k)
                                                               sqrt(n_k) lambda u - lambda^2 / 2   otherwise,

quadratic for near clients and linear (hence robust) for far ones. The
problem is convex, and fedmm solves it **to a tolerance** (the authors'
scripts run their loop body once, a bug; see ``../shared/papers/README.md``)
with one of two alternating schemes:

- ``solver="alternating"``: the paper's (App. B.1 (i)-(iii)), alternating the
  two closed forms above. On the profiled objective it is gradient descent
  with step ``1 / sum_k n_k``, so each round moves ``nu_bar`` by at most about
  one threshold: it creeps when many clients are far from the centre (the
  tests found two clients 6.5 apart with threshold 0.006 needing thousands of
  rounds).
- ``solver="irls"`` (default): alternate between ``nu_bar`` and the
  half-quadratic weights ``omega_k = n_k`` (near clients) or
  ``sqrt(n_k) lambda / ||theta_k - nu_bar||`` (far ones), with
  ``nu_bar = sum_k omega_k theta_k / sum_k omega_k``: iteratively reweighted
  least squares, a majorize-minimize scheme for the same objective (each step
  cannot increase it) with Newton-size steps. Then ``Delta`` takes its closed
  form at the final ``nu_bar``. The loop runs compiled (Numba): a FedGrEM
  round solves a small problem a dozen or so times, and numpy's per-call
  overhead was a third of a fit's time. ``solver="irls-numpy"`` is the same
  loop in numpy, the reference the compiled one is tested against.

Both stop when ``nu_bar`` moves by less than the tolerance, and the tests hold
both to the optimality conditions.

**A weight per block** (fedmm's, beyond the paper). With ``weights`` ``omega_kr``
the problem is

    min  sum_k  omega_kr ( 1/2 ||nu_k - theta_k||^2 + lambda / sqrt(n_k) ||nu_k - nu_bar||_2 ):

the threshold is still ``lambda / sqrt(n_k)``, the closed form of ``Delta_k`` is unchanged, and
``omega`` only decides how much each client's estimate counts in the centre,
``nu_bar = sum_k omega_k (theta_k - Delta_k) / sum_k omega_k``, and how far a far client can pull
it (``omega_k lambda / sqrt(n_k)``, the Huber slope). ``omega = n_k`` is the paper's problem.

**A metric per client** (fedmm's, beyond the paper). With ``metric`` ``G_kr``
(symmetric positive definite), every norm above becomes
``||u||_G = sqrt(u^T G_kr u)``:

    min  sum_k  n_k/2 ||nu_k - theta_k||_G^2 + sqrt(n_k) lambda ||nu_k - nu_bar||_G.

The soft-threshold keeps its form (it acts on ``L^T u`` for ``G = L L^T``), and
the weighted means become ``nu_bar = (sum_k omega_k G_kr)^{-1} sum_k omega_k G_kr theta_k``.
For regressions ``G_kr = A_kr / N_kr``, the component's design moment
(:meth:`fedmm.families.RegressionFamily.central_metric`): ``n_k G_kr`` is then the
information about ``theta_kr`` in the client's data, so clients that all pool
meet at the information-weighted mean of their local estimates, which for
preconditioned gradient steps is the pooled M-step (pooled EM's fixed point)
rather than an average of per-client least-squares fits; and the distances
do not depend on linear maps of the features. Under the paper's design
(``x ~ N(0, I)``) ``G_kr`` is ``I`` in expectation, the paper's problem.
"""

from typing import NamedTuple

import numpy as np
from numba import prange
from scipy.stats import chi2

from ...reductions import largest_magnitudes
from ...robust import kept_clients
from ...threads import parallel_kernel
from ..tuning import noise_ratios

__all__ = ["CentralResult", "central_update", "robust_centre", "soft_threshold", "pooling_share", "centre_margin",
           "between_variance", "linear_shrinkage", "SOLVERS"]


class CentralResult(NamedTuple):
    """Solution of the central problem for all components at once.

    Attributes
    ----------
    nu : ndarray of shape (K, R, p)
        The clients' new parameters ``nu_k``.
    center : ndarray of shape (R, p)
        The consensus ``nu_bar`` of every component.
    pooled : ndarray of shape (K, R), bool
        Client ``k``'s component ``r`` was shrunk exactly onto the centre.
    distance : ndarray of shape (K, R)
        ``||theta_k - nu_bar||`` (in the metric, if given): how far each client's input was from the centre.
    threshold : ndarray of shape (K, R)
        ``lambda / sqrt(n_k)``: the distance below which a client's component is pooled, and by which an
        unpooled one moves towards the centre (after :func:`linear_shrinkage`, the distance each moved).
    n_iter : int
        Alternating-minimization rounds used.
    converged : bool
    """

    nu: np.ndarray
    center: np.ndarray
    pooled: np.ndarray
    distance: np.ndarray
    threshold: np.ndarray
    n_iter: int
    converged: bool


SOLVERS = ("irls", "irls-numpy", "alternating")


def pooling_share(central):
    """``s_kr = min(1, threshold_kr / distance_kr)`` (K, R): how far each client's component moved to the centre.

    The solution is ``nu_kr = s_kr nu_bar_r + (1 - s_kr) theta_kr`` (the group soft-threshold, the ``Delta_k``
    step of eq. (6) of Algorithm 1), ``s = 1`` exactly when pooled, and the centre is the mean of the ``theta_kr``
    weighted by ``omega_kr s_kr`` (``n_k s_kr`` by default).
    """
    with np.errstate(divide="ignore"):
        return np.where(central.pooled, 1.0, np.minimum(1.0, central.threshold / central.distance))


def centre_margin(theta, center, metric=None):
    """``m_kr = max(0, 1 - a_kr d_kr(r) / d_kr(r'))`` (K, R): how clearly each client's estimate of a
    component is nearer that component's centre than the nearest other one, ``r'`` (fedmm's, beyond
    the paper).

    ``d_kr(s)`` is the distance from ``theta_kr`` to the centre ``nu_bar_s`` (in the block's metric
    ``G_kr``, if given). ``m = 1`` at its own centre, ``1/2`` where its own centre is half as far as
    the nearest other, 0 where another is nearer than its own: a component whose label does not tell
    which component it estimates. The reach ``a_kr = clip(2 - d_kr(r') / D_rr', 0, 1)``, with
    ``D_rr'`` the distance between the two centres, keeps that reading to estimates within reach of
    ``nu_bar_r'`` (``a = 1`` up to ``D_rr'`` from it) and fades it out by twice that: an estimate far
    from every centre (a client that differs, an outlier) has ``m = 1``, and is left to the
    threshold. ``1`` with one component, and on coinciding centres.
    """
    R = center.shape[0]
    if R == 1:
        return np.ones(theta.shape[:2])
    d = _norm(theta[:, :, None, :] - center, None if metric is None else metric[:, :, None])    # (K, R, R)
    own = d[:, np.arange(R), np.arange(R)]
    other = np.where(np.eye(R, dtype=bool), np.inf, d)
    nearest = other.argmin(axis=-1)                                                   # r' (K, R)
    near = np.take_along_axis(other, nearest[..., None], -1)[..., 0]
    D = _norm(center[None] - center[nearest], metric)                                 # D_rr'
    with np.errstate(divide="ignore", invalid="ignore"):
        reach = np.where(D > 0, np.clip(2.0 - near / D, 0.0, 1.0), 0.0)
        return np.where(reach * own == 0, 1.0, np.clip(1.0 - reach * own / near, 0.0, 1.0))


def between_variance(distance, N, p, trim):
    """``tau_r^2`` (R,): the spread of the clients' components around their centre beyond their noise, per
    coordinate (fedmm's, for :func:`linear_shrinkage`).

    In noise units a client's estimate ``theta_tilde_kr`` of a component it holds ``N_kr`` samples of is
    ``theta_kr + e``, ``E ||e||^2 = p / N_kr`` (:func:`fedmm.algorithms.tuning.sure_penalty`), and the clients' own
    ``theta_kr`` spread around the centre by ``tau_r^2`` per coordinate (the paper's ``h^2 / p`` on its
    design, Sec. 4.1), so ``E d_kr^2 / p = tau_r^2 + 1 / N_kr``. The moment estimate weighs block ``kr`` by
    ``N_kr``, ``tau_r^2 = max(0, sum_k (N_kr d_kr^2 / p - 1) / sum_k N_kr)``, over the blocks that count
    (:func:`fedmm.algorithms.tuning.noise_ratios`: ``N_kr >= 1``), leaving out in each component the ``floor(trim K)``
    clients with the largest ``N_kr d_kr^2 / p`` (outliers, whose spread is not the others'). Per component,
    not per client as SURE's penalty trims (:func:`fedmm.algorithms.tuning.alike_clients`): with whole clients left out,
    a component that had wandered on a client the trim kept stayed in that component's spread, and the MoR
    design at ``h = 2`` went from 3.22 to 3.37 (20 seeds, two of them from 3.1 to 4.2). 0 where no block
    counts.

    Parameters
    ----------
    distance : ndarray of shape (K, R)
        ``d_kr = ||theta_tilde_kr - nu_bar_r||`` in noise units (in the metric, if any).
    N : ndarray of shape (K, R)
        The blocks' sizes ``N_kr``.
    p : int
        Parameters per component.
    trim : float
    """
    N = np.asarray(N, dtype=float)
    ratio, counted = noise_ratios(distance, N, p)
    excess = np.where(counted, ratio - 1.0, -np.inf)
    keep = np.stack([kept_clients(-column, trim) for column in excess.T], axis=1)
    excess, N = np.take_along_axis(excess, keep, 0), np.take_along_axis(N, keep, 0)
    counted = np.isfinite(excess)
    total = np.where(counted, N, 0.0).sum(axis=0)
    tau2 = np.where(counted, excess, 0.0).sum(axis=0) / np.where(total > 0, total, 1.0)
    return np.maximum(tau2, 0.0)


#: The consistency test of :func:`linear_shrinkage`: blocks whose ``z`` is below the ``chi2_p`` quantile at
#: the first level, divided by ``p``, are shrunk linearly; beyond the second, soft-thresholded; in between,
#: a mix of the two.
CONSISTENT_LEVELS = (0.99, 0.9999)


def linear_shrinkage(central, theta, N, metric=None, trim=0.2):
    """Every client's component shrunk towards the centre by the empirical Bayes factor of its noise and the
    clients' spread, in place of the soft threshold (fedmm's, beyond the paper; ``shrinkage="linear"``).

    With ``d_kr`` the block's distance to the robust centre ``nu_bar_r`` of ``central`` (the Huber centre of
    the central problem, Algorithm 1), ``v_kr = 1 / N_kr`` its noise and ``tau_r^2`` the clients' spread
    (:func:`between_variance`), the posterior mean of ``theta_kr`` under a normal spread of the clients
    around the centre is ``nu_bar_r + f_kr (theta_tilde_kr - nu_bar_r)``,
    ``f_kr = tau_r^2 / (tau_r^2 + v_kr)`` (the heteroscedastic James-Stein / Efron-Morris estimator; Xie, Kou &
    Brown, JASA 2012): a component of few samples moves most of the way, all of it when the clients do not
    differ (``tau = 0``), and one of many keeps most of its own estimate when they do. The soft threshold
    shrinks every block by the same distance ``lambda / sqrt(n_k)``, too little where the estimate is noise
    and too much where the difference is real (on the paper's design, docs/fedgrem.md).

    A block the normal spread does not explain, ``z_kr = d_kr^2 / (p (tau_r^2 + v_kr))`` beyond the
    :data:`CONSISTENT_LEVELS` quantiles of ``chi2_p / p`` (an outlier client), keeps the soft threshold's
    solution, which the paper's robustness rests on (Sec. 2.3); continuously in ``z`` between the two levels,
    so that the rounds can settle.

    Parameters
    ----------
    central : CentralResult
        The central problem's solution at the round's ``lambda``.
    theta : ndarray of shape (K, R, p)
        The clients' estimates ``theta_tilde`` (noise units).
    N : ndarray of shape (K, R)
        The blocks' sizes ``N_kr``.
    metric : ndarray of shape (K, R, p, p), optional
        As for :func:`central_update`.
    trim : float
        As for :func:`between_variance`.

    Returns
    -------
    CentralResult
        ``central`` with the clients' parameters ``nu``, ``pooled``, and as ``threshold`` the distance each
        block moved (``s_kr d_kr``, so that :func:`pooling_share` is the new rule's share ``s_kr`` and
        ``d_kr - threshold_kr`` each block's distance from the centre, as after the soft threshold).
    """
    p = theta.shape[-1]
    N = np.broadcast_to(np.asarray(N, dtype=float), central.distance.shape)
    tau2 = between_variance(central.distance, N, p, trim)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = 1.0 / N
        f = np.where(N > 0, tau2 / (tau2 + v), 0.0)
        z = np.where(N > 0, central.distance ** 2 / (p * (tau2 + v)), 0.0)
    lo, hi = chi2.ppf(CONSISTENT_LEVELS, p) / p
    consistent = np.clip((hi - z) / (hi - lo), 0.0, 1.0)
    share = consistent * (1.0 - f) + (1.0 - consistent) * pooling_share(central)
    pooled = share == 1.0
    nu = np.where(pooled[..., None], central.center, theta - share[..., None] * (theta - central.center))
    return central._replace(nu=nu, pooled=pooled, threshold=share * central.distance)


def central_update(theta, n_k, lam, *, weights=None, metric=None, solver="irls", tol=1e-10, max_iter=1000):
    """Solve the central problem of FedGrEM for every component.

    Parameters
    ----------
    theta : ndarray of shape (K, R, p)
        The clients' parameters after their local gradient step.
    n_k : ndarray of shape (K,) or (K, R)
        Client sample sizes, or per-component effective sizes: the threshold is ``lam / sqrt(n_k)``.
    lam : float
        Penalty ``lambda`` (``0`` returns the inputs; ``inf`` the ``weights``-weighted mean).
    weights : ndarray of shape (K,) or (K, R), optional
        Each block's weight ``omega_kr`` in the objective (see the module docstring); ``n_k`` (the paper's)
        when not given.
    metric : ndarray of shape (K, R, p, p), optional
        The metric ``G_kr`` of each client's component (see the module docstring); ``None``, the
        Euclidean norm of the paper. With a metric, ``"irls"`` runs its numpy loop.
    solver : {"irls", "alternating"}
        See the module docstring.
    tol : float
        Stop when no coordinate of any ``nu_bar`` moved by more than
        ``tol * (1 + median_kr max_j |theta_krj|)`` in a round.
    max_iter : int
        Cap on the rounds.

    Returns
    -------
    CentralResult
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}.")
    theta = np.asarray(theta, dtype=float)
    n_k = _per_block(n_k, theta)
    # A far block's Huber slope omega / sqrt(n_k): sqrt(n_k) itself for the paper's weights, computed as such
    # so that the default solves bit for bit as before weights existed.
    if weights is None:
        weights, slope = n_k, np.sqrt(n_k)
    else:
        weights = _per_block(weights, theta)
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = weights / np.sqrt(n_k)
    with np.errstate(divide="ignore"):
        threshold = lam / np.sqrt(n_k)                                             # (K, R); inf where empty
    # The tolerance's unit is the median block's size, not the largest: one client's enormous (finite)
    # estimate would otherwise loosen it until the centre stops wherever that client's pull left it.
    scale = 1.0 + np.median(largest_magnitudes(theta))
    # Both schemes start from Delta = 0 (App. B.1, step (i)): the weighted mean.
    if metric is not None:
        metric = np.asarray(metric, dtype=float)
        if metric.shape != theta.shape + theta.shape[-1:]:
            raise ValueError(f"metric must have shape {theta.shape + theta.shape[-1:]}, got {metric.shape}.")
    center = _weighted_mean(theta, weights, metric)
    if lam == 0:
        # No penalty: nu_k = theta_k and any nu_bar is optimal; report the weighted mean.
        distance = _norm(theta - center, metric)
        return CentralResult(theta.copy(), center, distance == 0, distance, threshold, 0, True)
    iterate = _irls if solver == "irls" and metric is None else _numpy_iterations(solver, threshold, metric)
    center, it, converged = iterate(theta, n_k, weights, slope, float(lam), center, tol * scale, max_iter)
    u = theta - center
    distance = _norm(u, metric)
    nu = soft_threshold(u, threshold, metric, distance)
    nu += center
    # Pooled: Delta_k = 0, i.e. not beyond the threshold (an empty component's is infinite).
    return CentralResult(nu, center, ~(distance > threshold), distance, threshold, it, converged)


def on_centre(central, empty):
    """``central`` with the blocks ``empty`` (K, R) moved onto their centre and pooled: a client's component that
    holds none of its rows carries no information (a block's weight in the problem, eq. (6) of Algorithm 1 / App.
    B.1 with fedmm's weights, is the information in ``theta_tilde_kr``, ``docs/fedgrem.md``), so the penalty alone
    decides it, and sits it on the centre."""
    if not empty.any():
        return central
    center = np.broadcast_to(central.center, central.nu.shape)
    return central._replace(nu=np.where(empty[..., None], center, central.nu), pooled=central.pooled | empty)


def robust_centre(updates, share, clip):
    """The centre of FedGrEM's central problem (eq. (6); :func:`central_update`) over the clients' updates (K, m)
    with weights ``share`` and penalty ``clip``: the Huber M-estimate of their location, where a client farther
    than ``clip`` pulls with a force ``clip`` whatever its distance. Under local noise every update lies far
    beyond ``clip``, and it is their weighted geometric median (FedGrEM's private server,
    :meth:`fedmm.algorithms.FedGrEM.private`)."""
    return central_update(updates[:, None, :], np.ones(len(share)), clip, weights=share).center[0]


def _per_block(sizes, theta):
    """``sizes`` (K,) or (K, R) as (K, R) floats. A component empty on every client (all 0) has no weighted
    mean: it is solved as if every client held one sample of it. Finite, and nothing depends on where an
    empty component sits."""
    sizes = np.broadcast_to(np.asarray(sizes, dtype=float).reshape(len(theta), -1), theta.shape[:2])
    return np.where(np.any(sizes > 0, axis=0), sizes, 1.0)


def _numpy_iterations(solver, threshold, metric=None):
    """The loop of ``solver`` ("irls", "irls-numpy" or "alternating") in numpy, with :func:`_irls`'s
    signature."""
    def irls_step(theta, weights, slope, lam, center):
        distance = _norm(theta - center, metric)                                      # (K, R)
        with np.errstate(divide="ignore", invalid="ignore"):
            far = slope * lam / distance
        return _weighted_mean(theta, np.where(distance <= threshold, weights, far), metric)

    def alternating_step(theta, weights, slope, lam, center):
        return _weighted_mean(theta - soft_threshold(theta - center, threshold, metric), weights, metric)

    step = alternating_step if solver == "alternating" else irls_step

    def iterate(theta, n_k, weights, slope, lam, center, tol, max_iter):
        for it in range(1, max_iter + 1):
            new_center = step(theta, weights, slope, lam, center)
            moved = np.abs(new_center - center).max()
            center = new_center
            if moved <= tol:
                return center, it, True
        return center, max_iter, False
    return iterate


@parallel_kernel()
def _irls_loop(theta, n_k, weights, slope, lam, center, tol, max_iter):
    """The IRLS loop of :func:`central_update` on component-major arrays, ``theta`` (R, K, p), ``n_k``,
    ``weights`` and the far blocks' ``slope`` (R, K): ``(center, n_iter, converged)``. Each iteration
    runs the components in parallel for large problems (:func:`fedmm.threads.parallel_kernel`)."""
    R, K, p = theta.shape
    center = center.copy()
    for it in range(1, max_iter + 1):
        new = np.zeros((R, p))
        for r in prange(R):
            total = 0.0
            for k in range(K):
                distance = 0.0
                for j in range(p):
                    distance += (theta[r, k, j] - center[r, j]) ** 2
                distance = np.sqrt(distance)
                root = np.sqrt(n_k[r, k])
                # distance <= lam / root, written so that an empty component (n_k = 0) is near.
                omega = weights[r, k] if distance * root <= lam else slope[r, k] * lam / distance
                total += omega
                for j in range(p):
                    new[r, j] += omega * theta[r, k, j]
            for j in range(p):
                new[r, j] /= total
        moved = 0.0
        for r in range(R):
            for j in range(p):
                moved = max(moved, abs(new[r, j] - center[r, j]))
        center = new
        if moved <= tol:
            return center, it, True
    return center, max_iter, False


def _irls(theta, n_k, weights, slope, lam, center, tol, max_iter):
    """:func:`_irls_loop`, compiled, with the components in parallel for large problems (work: K R p per
    iteration).

    The loop reads each component's clients in turn, so it gets them component-major, one contiguous
    slab per component: with the clients' (K, R, p) layout every iteration strode through all of it for
    each component (at K = 100,000: 103 ms per update against 47 ms with the copy; 4.8 against 2.9 ms at
    K = 10,000).
    """
    return _irls_loop(theta.size, theta.shape[1], np.ascontiguousarray(theta.transpose(1, 0, 2)),
                      np.ascontiguousarray(n_k.T), np.ascontiguousarray(weights.T), np.ascontiguousarray(slope.T),
                      lam, center, tol, max_iter)


def _weighted_mean(points, weights, metric=None):
    """``sum_k weights[k, r] points[k, r] / sum_k weights[k, r]`` for every component: (R, p); with a
    metric, ``(sum_k weights G_kr)^{-1} sum_k weights G_kr points[k, r]``."""
    weights = np.broadcast_to(weights, points.shape[:2])
    if metric is None:
        return np.einsum("kr,krp->rp", weights, points) / weights.sum(axis=0)[:, None]
    H = np.einsum("kr,krij->rij", weights, metric)
    b = np.einsum("kr,krij,krj->ri", weights, metric, points)
    return np.linalg.solve(H, b[..., None])[..., 0]


def _norm(u, metric=None):
    """``||u[k, r]||``, or ``sqrt(u^T G_kr u)`` with a metric: (K, R), or over any leading axes the two
    broadcast to."""
    if metric is None:
        # einsum, not np.linalg.norm(axis=-1): numpy's reductions over a short last axis cost 5x more, and
        # FedGrEM takes these norms every round over all K clients.
        return np.sqrt(np.einsum("...i,...i->...", u, u))
    return np.sqrt(np.maximum(np.einsum("...i,...ij,...j->...", u, metric, u), 0.0))


def soft_threshold(u, threshold, metric=None, norm=None):
    """Group soft-threshold of every ``u[k, r]`` at ``threshold[k, r]`` (the ``Delta_k`` step of eq. (6)),
    in the metric's norm (``norm``, :func:`_norm` of ``u``, when already at hand)."""
    norm = (_norm(u, metric) if norm is None else norm)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        shrink = np.where(norm > threshold[..., None], 1.0 - threshold[..., None] / norm, 0.0)
    return shrink * u
