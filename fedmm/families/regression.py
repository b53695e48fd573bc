"""Linear-regression components: FedGrEM Sec. 3.4 (eq. 5), App. A.2 and E.5."""

from numbers import Real
from typing import NamedTuple

import numpy as np

from ..kernels import get_kernels
from ._base import _TINY, Family, one_hot

NOISE_MODES = ("shared", "component")


class RegressionStats(NamedTuple):
    """Per-client sums: ``N`` (K, R), ``A = sum g x x^T`` (K, R, p, p), ``b = sum g y x`` (K, R, p), ``Syy = sum g y^2`` (K, R)."""

    N: np.ndarray
    A: np.ndarray
    b: np.ndarray
    Syy: np.ndarray


class RegressionFamily(Family):
    """Components ``y | x, z = r ~ N(x^T theta_r, sigma_r^2)``.

    Parameters
    ----------
    fit_intercept : bool
        Append a column of ones to ``x``, so ``theta_r`` ends with an intercept.
        The paper's model (eq. 5) has none.
    noise_variance : float or {"shared", "component"}
        A float fixes ``sigma_r^2`` (1.0 is the paper's model); ``"shared"``
        estimates one variance for all components of a client, ``"component"``
        one per component (closed-form M-step; an extension beyond the theory).
    reg_coef : float
        Ridge added to the diagonal of the weighted normal equations so an
        empty or collinear component still gives finite coefficients.
    backend : str
        Kernel backend (see :func:`fedmm.kernels.get_kernels`).
    """

    needs_y = True

    def __init__(self, fit_intercept=True, noise_variance=1.0, reg_coef=1e-8, backend="numpy"):
        if not (noise_variance in NOISE_MODES
                or (isinstance(noise_variance, Real) and not isinstance(noise_variance, bool)
                    and noise_variance > 0)):
            raise ValueError(f"noise_variance must be a positive number or one of {NOISE_MODES}, "
                             f"got {noise_variance!r}.")
        self.fit_intercept = fit_intercept
        self.noise_variance = noise_variance
        self.reg_coef = reg_coef
        self.kernels = get_kernels(backend)

    def design(self, X):
        return np.column_stack([X, np.ones(len(X))]) if self.fit_intercept else X

    def design_theta(self, theta):
        """Coefficients without intercept get a zero intercept when the model has one."""
        if not self.fit_intercept:
            return theta
        return np.concatenate([theta, np.zeros(theta.shape[:-1] + (1,))], axis=-1)

    def param_dim(self, n_features):
        return n_features + bool(self.fit_intercept)

    def estep(self, data, params):
        loglik, *stats = self.kernels.regression_estep(data.X, data.y, data.offsets, params.weights,
                                                       params.theta, params.scale)
        return loglik, RegressionStats(*stats)

    def log_resp(self, data, params):
        return self.kernels.regression_log_resp(data.X, data.y, data.offsets, params.weights,
                                                params.theta, params.scale)

    def stats_from_resp(self, data, resp):
        return RegressionStats(*self.kernels.regression_stats(data.X, data.y, data.offsets, resp))

    def m_step(self, stats):
        """Weighted least squares ``theta_r = A_r^{-1} b_r``, the maximizer of Q-hat (App. E.5)."""
        coef = self._solve(stats.A, stats.b)
        return coef, self.update_scale(stats, coef)

    def penalized_m_step(self, stats, target, strength):
        """Ridge towards ``target``: ``(A_r + s N_r I) theta_r = b_r + s N_r target_r``."""
        sN = strength * stats.N[..., None]
        return self._solve(stats.A + sN[..., None] * np.eye(stats.b.shape[-1]), stats.b + sN * target)

    def _solve(self, A, b):
        """``A^{-1} b`` per component, with a small ridge so empty or collinear components stay finite."""
        p = b.shape[-1]
        ridge = self.reg_coef * (np.trace(A, axis1=-2, axis2=-1)[..., None, None] / p + 1.0)
        return np.linalg.solve(A + ridge * np.eye(p), b[..., None])[..., 0]

    def gradient_step(self, stats, params, eta, n_k):
        """One gradient ascent step on Q-hat (FedGrEM Algorithm 1; gradient from App. E.5).

        ``d/dtheta_r Q-hat = (1/n_k) sum_i g_ir x_i (y_i - x_i^T theta_r) / sigma_r^2``.
        The step is taken on ``sigma_r^2`` times the gradient,
        ``(b_r - A_r theta_r) / n_k``: the exact gradient under the paper's unit
        noise, and scale-free otherwise.
        """
        step = (stats.b - np.einsum("krij,krj->kri", stats.A, params.theta)) / n_k[:, None, None]
        return params.theta + eta[..., None] * step

    def update_scale(self, stats, theta):
        """Noise variance maximizing Q-hat at ``theta``: residual sum of squares over ``N``."""
        K, R, _ = theta.shape
        if self.noise_variance not in NOISE_MODES:
            return np.full((K, R, 1), float(self.noise_variance))
        # sum_i g_ir (y_i - x_i^T theta_r)^2 = Syy - 2 theta^T b + theta^T A theta
        rss = (stats.Syy - 2.0 * np.einsum("kri,kri->kr", theta, stats.b)
               + np.einsum("kri,krij,krj->kr", theta, stats.A, theta))
        rss = np.maximum(rss, 0.0)
        if self.noise_variance == "shared":
            var = np.repeat(rss.sum(axis=1, keepdims=True) / (stats.N.sum(axis=1, keepdims=True) + _TINY), R, axis=1)
        else:
            var = rss / (stats.N + _TINY)
        return np.maximum(var, _TINY)[..., None]

    def initial_resp(self, X, y, n_components, random_state):
        """A random partition of the samples, as mixreg and flexmix start."""
        return one_hot(random_state.randint(n_components, size=len(X)), n_components)

    def n_parameters(self, n_components, n_features):
        noise = {"shared": 1, "component": n_components}.get(self.noise_variance, 0)
        return n_components * self.param_dim(n_features) + noise + n_components - 1
