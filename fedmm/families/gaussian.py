"""Gaussian components: FedGrEM Sec. 3.3 (eq. 4), App. A.1 and E.2."""

from typing import NamedTuple

import numpy as np
from sklearn.cluster import KMeans

from ..units import Units, scale_or_one
from ._base import _TINY, Family, one_hot

COVARIANCE_TYPES = ("identity", "spherical", "diag")


class GaussianStats(NamedTuple):
    """Per-client sums: ``N`` (K, R), ``Sx = sum_i g_ir x_i`` (K, R, d), and ``Sxx``: ``sum_i g_ir x_ij^2``
    (K, R, d) for diagonal variances, ``sum_i g_ir ||x_i||^2`` (K, R, 1) for spherical ones, None for identity."""

    N: np.ndarray
    Sx: np.ndarray
    Sxx: np.ndarray | None


class GaussianFamily(Family):
    """Components ``N(mu_r, Sigma_r)``.

    Parameters
    ----------
    covariance_type : {"identity", "spherical", "diag"}
        ``"identity"``: ``Sigma_r = I``, the model of FedGrEM eq. (4), under
        which its theory holds. ``"spherical"`` (``sigma_r^2 I``) and
        ``"diag"`` (``diag(sigma_r^2)``) estimate variances with the
        closed-form local M-step: an extension beyond the theory.
    reg_covar : float
        Added to every estimated variance, as in scikit-learn, but in
        standard units (a fraction of the feature's pooled variance), so it
        does not depend on the data's units.
    backend : str
        Kernel backend (see :func:`fedmm.kernels.get_kernels`).
    """

    def __init__(self, covariance_type="identity", reg_covar=1e-6, backend="numpy"):
        if covariance_type not in COVARIANCE_TYPES:
            raise ValueError(f"covariance_type must be one of {COVARIANCE_TYPES}, got {covariance_type!r}.")
        self.covariance_type = covariance_type
        self.reg_covar = reg_covar
        super().__init__(backend)

    @property
    def scale_per_component(self):
        """Whether each component has its own estimated variance(s)."""
        return self.covariance_type != "identity"

    def units(self, moments):
        """Identity: none (unit variance is the model). Spherical: the pooled mean and one scale, the root
        of the mean pooled variance (equivariant under shifts, rotations, isotropic scaling). Diagonal: the
        pooled mean and each feature's pooled standard deviation (shifts and per-feature scaling)."""
        d = len(moments.mean)
        if self.covariance_type == "identity":
            return Units.identity(d)
        variance = np.diag(moments.second) - moments.mean ** 2
        if self.covariance_type == "spherical":
            variance = np.full(d, variance.mean())
        return Units(moments.mean, np.diag(1.0 / scale_or_one(variance)))

    def to_original(self, params, units):
        """``mu = shift + mu_std * s`` and ``sigma^2 = sigma_std^2 * s^2`` (``s`` the features' scales)."""
        s = 1.0 / np.diag(units.x_map)
        var_scale = s ** 2 if params.scale.shape[-1] == len(s) else s[:1] ** 2
        return params._replace(theta=units.x_shift + params.theta * s, scale=params.scale * var_scale)

    def to_internal(self, theta, units):
        return (theta - units.x_shift) * np.diag(units.x_map)

    @property
    def _squares(self):
        """Which squared sums the variances need (see ``fedmm.kernels._numpy._gaussian_stats``)."""
        return {"identity": "none", "spherical": "total", "diag": "coordinates"}[self.covariance_type]

    def estep(self, data, params):
        loglik, *stats = self.kernels.gaussian_estep(data.X, data.offsets, params.weights, params.theta,
                                                     params.scale, self._squares)
        return loglik, GaussianStats(*stats)

    def log_resp(self, data, params):
        return self.kernels.gaussian_log_resp(data.X, data.offsets, params.weights, params.theta, params.scale)

    def stats_from_resp(self, data, resp):
        return GaussianStats(*self.kernels.gaussian_stats(data.X, data.offsets, resp, self._squares))

    def m_step(self, stats):
        """``mu_r = Sx_r / N_r``, the maximizer of Q-hat (App. E.2), and the variances at it."""
        means = stats.Sx / (stats.N[..., None] + _TINY)
        return means, self.update_scale(stats, means)

    def penalized_m_step(self, stats, target, strength):
        """``mu_r = (Sx_r + s N_r target_r) / (N_r (1 + s))``: the sample mean pulled towards ``target``."""
        N = stats.N[..., None] + _TINY
        return (stats.Sx + strength * N * target) / (N * (1.0 + strength))

    def gradient_step(self, stats, params, eta, n_k):
        """One gradient ascent step on Q-hat (FedGrEM Algorithm 1; gradient from App. E.2).

        ``d/dmu_r Q-hat = (1/n_k) sum_i g_ir (x_i - mu_r) / sigma_r^2``. The step
        is taken on ``sigma_r^2`` times the gradient, ``(Sx_r - N_r mu_r) / n_k``,
        which is the exact gradient under the paper's identity covariance and
        keeps ``eta = C_eta / w`` meaningful otherwise (``C_eta = 1`` with
        ``w = N_r / n_k`` is the full M-step).
        """
        step = (stats.Sx - stats.N[..., None] * params.theta) / n_k[:, None, None]
        return params.theta + eta[..., None] * step

    def update_scale(self, stats, theta):
        """Variances maximizing Q-hat at means ``theta``: ``sum_i g_ir (x_i - mu_r)^2 / N_r`` (+ reg_covar)."""
        K, R, d = theta.shape
        if self.covariance_type == "identity":
            return np.ones((K, R, 1))
        N = stats.N[..., None] + _TINY
        cross, square = theta * stats.Sx / N, theta ** 2
        if self.covariance_type == "spherical":  # Sxx holds sum_i g_ir ||x_i||^2: average over coordinates
            var = (stats.Sxx / N - (2.0 * cross - square).sum(axis=-1, keepdims=True)) / d
        else:
            var = stats.Sxx / N - 2.0 * cross + square
        return np.maximum(var, 0.0) + self.reg_covar

    def initial_resp(self, X, y, n_components, random_state):
        """Hard labels of one k-means (k-means++ seeding) run."""
        labels = KMeans(n_clusters=n_components, n_init=1, init="k-means++",
                        random_state=random_state).fit(X).labels_
        return one_hot(labels, n_components)

    def sample(self, theta, scale, labels, random_state, X=None):
        """``x = mu_r + sigma_r * z``, ``z ~ N(0, I)``, for each label ``r`` (variances per coordinate or one)."""
        z = random_state.standard_normal((len(labels), theta.shape[-1]))
        return theta[labels] + np.sqrt(scale[labels]) * z

    def n_parameters(self, n_components, n_features):
        var = {"identity": 0, "spherical": n_components, "diag": n_components * n_features}
        return n_components * n_features + var[self.covariance_type] + n_components - 1
