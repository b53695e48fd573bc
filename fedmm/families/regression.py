"""Linear-regression components: FedGrEM Sec. 3.4 (eq. 5), App. A.2 and E.5."""

from numbers import Real
from typing import NamedTuple

import numpy as np

from ..units import Units, scale_or_one, whitening
from ._base import _TINY, Family, combine_by_label, one_hot

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
    precondition : bool
        Take gradient steps preconditioned by the component's design
        ``(A_r / N_r)^{-1}`` (see :meth:`gradient_step`); False gives the
        paper's plain gradient, which assumes ``E[x x^T] = I``.
    backend : str
        Kernel backend (see :func:`fedmm.kernels.get_kernels`).
    whiten : bool
        The units (:meth:`units`): ``x`` whitened (True), or shifted and scaled per feature (False: a coefficient
        that is zero stays zero in the fit's units, as sparse methods need, :mod:`fedmm.algorithms.sparse`).
    """

    needs_y = True

    def __init__(self, fit_intercept=True, noise_variance="component", reg_coef=1e-8, precondition=True,
                 backend="numpy", whiten=True):
        if not (noise_variance in NOISE_MODES
                or (isinstance(noise_variance, Real) and not isinstance(noise_variance, bool)
                    and noise_variance > 0)):
            raise ValueError(f"noise_variance must be a positive number or one of {NOISE_MODES}, "
                             f"got {noise_variance!r}.")
        self.fit_intercept = fit_intercept
        self.noise_variance = noise_variance
        self.reg_coef = reg_coef
        self.precondition = precondition
        self.whiten = whiten
        super().__init__(backend)

    @property
    def _estimates_noise(self):
        return self.noise_variance in NOISE_MODES

    @property
    def scale_per_component(self):
        """Whether each component has its own estimated variance."""
        return self.noise_variance == "component"

    def units(self, moments):
        """Centre ``x`` (with an intercept) and whiten it by its pooled second moment, so the model is
        equivariant under any invertible affine map of the features; centre ``y`` (with an intercept) and,
        when the noise variance is estimated, scale it by its pooled standard deviation. A fixed noise
        variance fixes the unit of ``y``, which is then only shifted. The whitened design has the pooled
        second moment ``I`` that the paper's MoR analysis assumes (``x ~ N(0, I_d)``, Sec. 3.4, App. A.2).
        Without :attr:`whiten`, each feature is scaled to unit second moment instead (``x_map`` a vector): the
        paper's ``E[x_j^2] = 1`` per feature, and a feature without effect keeps a zero coefficient."""
        mean = moments.mean if self.fit_intercept else np.zeros_like(moments.mean)
        second = moments.second - np.outer(mean, mean)
        y_shift = moments.y_mean if self.fit_intercept else 0.0
        y_scale = 1.0
        if self._estimates_noise:
            y_scale = float(scale_or_one(moments.y_second - 2.0 * y_shift * moments.y_mean + y_shift ** 2))
        x_map = whitening(second) if self.whiten else 1.0 / scale_or_one(np.diagonal(second))
        return Units(mean, x_map, y_shift, y_scale)

    def to_original(self, params, units):
        """With ``z = W^T (x - m)`` and ``y = m_y + s_y y_std``: ``beta = s_y W gamma``,
        ``beta_0 = m_y + s_y gamma_0 - m^T beta``, ``sigma^2 = s_y^2 sigma_std^2``."""
        d = len(units.x_shift)
        gamma = params.theta[..., :d]
        beta = units.y_scale * (gamma * units.x_map if units.x_map.ndim == 1 else gamma @ units.x_map.T)
        if self.fit_intercept:
            intercept = units.y_shift + units.y_scale * params.theta[..., d] - beta @ units.x_shift
            beta = np.concatenate([beta, intercept[..., None]], axis=-1)
        return params._replace(theta=beta, scale=params.scale * units.y_scale ** 2)

    def to_internal(self, theta, units):
        d = len(units.x_shift)
        beta = theta[..., :d]
        inverse = 1.0 / units.x_map if units.x_map.ndim == 1 else np.linalg.inv(units.x_map).T
        gamma = (beta * inverse if units.x_map.ndim == 1 else beta @ inverse) / units.y_scale  # beta = s_y gamma W^T
        if not self.fit_intercept:
            return gamma
        gamma0 = (theta[..., d] - units.y_shift + beta @ units.x_shift) / units.y_scale
        return np.concatenate([gamma, gamma0[..., None]], axis=-1)

    def scale_to_internal(self, scale, units):
        """``sigma_std^2 = sigma^2 / s_y^2``."""
        return scale / units.y_scale ** 2

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

        The paper's step ``eta = C_eta / w_r`` presumes ``A_r / n_k ~ w_r I``
        (``x ~ N(0, I)``, App. A.2); on other designs, and even on that one at
        small ``N_r`` (at ``N_r = 30``, ``p = 10`` the largest eigenvalue of
        ``A_r / N_r`` is about 2.5), ``eta lambda_max(A_r / n_k) > 2`` and the
        step overshoots. With ``precondition`` (default) the gradient is
        multiplied by ``(A_r / N_r)^{-1}``, the inverse of the component's own
        design moment (the empirical Fisher information of ``theta_r`` divided
        by its population value under the paper's design), so the step is
        ``eta w_hat_r (M-step - theta_r)``: equivariant under linear maps of
        ``x``, equal to the paper's in expectation under its design, and a
        contraction towards the M-step for ``eta w_hat_r < 2``.
        """
        residual = stats.b - np.einsum("krij,krj->kri", stats.A, params.theta)
        if self.precondition:
            residual = stats.N[..., None] * self._solve(stats.A, residual)
        return params.theta + eta[..., None] * residual / n_k[:, None, None]

    def central_metric(self, stats):
        """With ``precondition``, the design moment ``G_kr = A_kr / N_kr`` (``None`` without: the paper's).

        The metric the preconditioned step already works in (:meth:`gradient_step`): ``n_k G_kr`` is
        the information about ``theta_kr`` in the client's data (per unit noise variance, and up to
        ``w_kr``), so FedGrEM's central problem weighs each client's coefficients by what its data
        say about them, its pooled clients meet at pooled EM's fixed point, and its distances do not
        change under linear maps of the features (App. E.5's ``A_r``; ``E[G_kr] = I`` under the
        paper's design, App. B.1). A nearly empty component's metric is nearly zero, with a small
        ridge (as :meth:`_solve`) so that it stays positive definite.
        """
        if not self.precondition:
            return None
        G = stats.A / np.maximum(stats.N, _TINY)[..., None, None]
        p = G.shape[-1]
        ridge = self.reg_coef * (np.trace(G, axis1=-2, axis2=-1)[..., None, None] / p + 1.0)
        return G + ridge * np.eye(p)

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

    def combine_starts(self, starts, mass, n_components, random_state):
        """Component ``r`` of every client's start joins shared component ``r``, its coefficients and noise
        variance the members' averages weighted by ``mass``. A random partition's labels mean nothing (each
        component is the client's whole-data fit, up to noise), so clustering them would group clients, not
        components; matched by label, the clients' random partitions are one random partition of all rows,
        and the average is the pooled fit's start up to that noise."""
        return combine_by_label(starts, mass)

    def sample(self, theta, scale, labels, random_state, X=None):
        """``y = x^T theta_r + sigma_r e``, ``e ~ N(0, 1)``, for each row of the design ``X`` and its label ``r``."""
        mean = np.einsum("np,np->n", X, theta[labels])
        return mean + np.sqrt(scale[labels, 0]) * random_state.standard_normal(len(labels))

    def min_component_size(self, p):
        """``p`` samples determine ``p`` coefficients (intercept included), one more a component's own noise
        variance: with fewer, the component's line passes through its points (residual variance 0), held only
        by the regularizers."""
        return p + (self.noise_variance == "component")

    def n_client_scale_parameters(self, n_components, n_features):
        """A shared noise variance, one per client."""
        return 1 if self.noise_variance == "shared" else 0

    def n_parameters(self, n_components, n_features):
        noise = {"shared": 1, "component": n_components}.get(self.noise_variance, 0)
        return n_components * self.param_dim(n_features) + noise + n_components - 1
