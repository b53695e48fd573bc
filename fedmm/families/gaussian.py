"""Gaussian components: FedGrEM Sec. 3.3 (eq. 4), App. A.1 and E.2."""

from typing import NamedTuple

import numpy as np
from numba import vectorize

from .. import kmeans
from ..kernels.gaussian import precision_cholesky
from ..robust import client_median
from ..units import Units, scale_or_one
from ._base import _TINY, Family, MixtureParams, one_hot

COVARIANCE_TYPES = ("identity", "spherical", "diag", "tied", "full")


class GaussianStats(NamedTuple):
    """Per-client sums: ``N`` (K, R), ``Sx = sum_i g_ir x_i`` (K, R, d), and ``Sxx``: ``sum_i g_ir x_ij^2``
    (K, R, d) for diagonal variances, ``sum_i g_ir ||x_i||^2`` (K, R, 1) for spherical ones,
    ``sum_i g_ir x_i x_i^T`` (K, R, d * d) for full and tied covariances, None for identity."""

    N: np.ndarray
    Sx: np.ndarray
    Sxx: np.ndarray | None


class WhitenedSums(NamedTuple):
    """Per-client sums about given components in their own units (:meth:`GaussianFamily.whitened_sums`):
    ``N`` (K, R), ``Sz`` (K, R, d) and ``Szz`` (K, R, s), s as the variances' (None where they are fixed)."""

    N: np.ndarray
    Sz: np.ndarray
    Szz: np.ndarray | None


class GaussianFamily(Family):
    """Components ``N(mu_r, Sigma_r)``.

    Parameters
    ----------
    covariance_type : {"identity", "spherical", "diag", "tied", "full"}
        ``"identity"``: ``Sigma_r = I``, the model of FedGrEM eq. (4), under
        which its theory holds. ``"spherical"`` (``sigma_r^2 I``),
        ``"diag"`` (``diag(sigma_r^2)``), ``"full"`` (any ``Sigma_r``) and
        ``"tied"`` (one ``Sigma`` for all of a client's components) estimate
        them with the closed-form local M-step, as scikit-learn's
        ``GaussianMixture`` does: an extension beyond the theory. Parameters
        store full and tied covariances as flattened ``d x d`` matrices
        (``scale`` of shape (K, R, d * d); tied ones repeated over ``r``).
    reg_covar : float
        Added to every estimated variance, as in scikit-learn, but in
        standard units (a fraction of the feature's pooled variance), so it
        does not depend on the data's units.
    backend : str
        Kernel backend (see :func:`fedmm.kernels.get_kernels`).
    """

    private_form = True

    def __init__(self, covariance_type="identity", reg_covar=1e-6, backend="numpy"):
        if covariance_type not in COVARIANCE_TYPES:
            raise ValueError(f"covariance_type must be one of {COVARIANCE_TYPES}, got {covariance_type!r}.")
        self.covariance_type = covariance_type
        self.reg_covar = reg_covar
        super().__init__(backend)

    @property
    def scale_per_component(self):
        """Whether each component has its own estimated variance(s) (a tied covariance is the client's)."""
        return self.covariance_type not in ("identity", "tied")

    @property
    def _matrix(self):
        return self.covariance_type in ("tied", "full")

    @property
    def estimates_scale(self):
        """Whether the variances are estimated (every covariance type but ``"identity"``)."""
        return self.covariance_type != "identity"

    def whiten(self, delta, scale):
        """Displacements ``delta`` (..., R, d) of the component means in units of the components' own spread
        ``scale`` (..., R, s): ``P^T delta`` with ``Sigma^{-1} = P P^T``, whose norm is the Mahalanobis
        distance. A mean estimated from ``N`` samples then has coordinates of sd ``1 / sqrt(N)`` at any scale,
        as the log-variances of :meth:`log_scale` do."""
        P = self.precisions_cholesky(scale)
        if not self._matrix:
            return delta * (P if self.covariance_type == "diag" else P[..., None])
        return np.einsum("...ji,...j->...i", P, delta)

    def unwhiten(self, z, scale):
        """The inverse of :meth:`whiten`."""
        P = self.precisions_cholesky(scale)
        if not self._matrix:
            return z / (P if self.covariance_type == "diag" else P[..., None])
        return np.linalg.solve(np.swapaxes(P, -1, -2), z[..., None])[..., 0]

    def unit_scale(self, n_features):
        """Unit variances (s,) in this family's layout of ``scale``: those of a start that has seen no data."""
        if self._matrix:
            return np.eye(n_features).ravel()
        return np.ones(n_features if self.covariance_type == "diag" else 1)

    def units(self, moments):
        """Identity: none (unit variance is the model). Spherical: the pooled mean and one scale, the root
        of the mean pooled variance (equivariant under shifts, rotations, isotropic scaling). Diagonal, full
        and tied: the pooled mean and each feature's pooled standard deviation (shifts and per-feature
        scaling).

        Full and tied covariances are not whitened, although their likelihood would allow any invertible
        affine map: the k-means start, the one step with a metric of its own, sees clusters in
        standardized features that a whitening by the pooled covariance hides (every direction, the one
        that separates the clusters too, gets unit total variance). mclust's default start also works in
        the data's features, not sphered ones. Measured in ``docs/units.md``.
        """
        d = len(moments.mean)
        if self.covariance_type == "identity":
            return Units.identity(d)
        variance = moments.second - moments.mean ** 2   # each feature's (no responses: per-feature sums)
        if self.covariance_type == "spherical":
            variance = np.full(d, variance.mean())
        return Units(moments.mean, 1.0 / scale_or_one(variance))

    def to_original(self, params, units):
        """With ``z = (x - m) W``, ``W = diag(1 / s)`` (:meth:`units`: a scale per feature, kept as the vector
        ``1 / s``): ``mu = m + mu_std W^{-1}``, ``Sigma = W^{-1} Sigma_std W^{-1}``, that is ``mu = m + s mu_std``
        and ``Sigma_ij = s_i s_j Sigma_std,ij`` (``sigma^2 = sigma_std^2 s^2``)."""
        s = 1.0 / units.x_map
        theta = units.x_shift + params.theta * s
        d = theta.shape[-1]
        if self._matrix:
            cov = params.scale.reshape(params.scale.shape[:-1] + (d, d))
            scale = (s[:, None] * cov * s).reshape(params.scale.shape)
        else:
            scale = params.scale * (s ** 2 if params.scale.shape[-1] == d else s[:1] ** 2)
        return params._replace(theta=theta, scale=scale)

    def to_internal(self, theta, units):
        return (theta - units.x_shift) * units.x_map

    def scale_to_internal(self, scale, units):
        """``Sigma_std = W Sigma W`` for ``W = diag(1 / s)`` (``sigma_std^2 = sigma^2 / s^2``)."""
        W = units.x_map
        d = len(W)
        if self._matrix:
            return (W[:, None] * scale.reshape(scale.shape[:-1] + (d, d)) * W).reshape(scale.shape)
        s = 1.0 / W
        return scale / (s ** 2 if scale.shape[-1] == d else s[:1] ** 2)

    def coordinate_variances(self, scale):
        """Per-coordinate variances (K, R, s'): the diagonal or spherical variances themselves, and for full
        and tied covariances their mean variance ``trace / d`` (unchanged by the sign flips a per-feature
        map of the data makes of the standardized coordinates, so FedGrEM's noise units stay equivariant)."""
        if not self._matrix:
            return scale
        d = int(round(np.sqrt(scale.shape[-1])))
        return np.trace(scale.reshape(scale.shape[:-1] + (d, d)), axis1=-2, axis2=-1)[..., None] / d

    def center_scale(self, scale):
        """The consensus variances from the clients' (K, R, s): the coordinate-wise median, and for full and
        tied covariances ``L L^T`` with ``L`` the median of the clients' Cholesky factors (a median of
        matrices that stays positive definite)."""
        if not self._matrix:
            return super().center_scale(scale)
        d = int(round(np.sqrt(scale.shape[-1])))
        L = client_median(np.linalg.cholesky(scale.reshape(scale.shape[:-1] + (d, d))))
        return (L @ np.swapaxes(L, -1, -2)).reshape(scale.shape[1:])

    def log_scale(self, scale, n_features):
        """Log-variances in noise units (:meth:`Family.log_scale`). Spherical: ``log(sigma^2) sqrt(d / 2)``
        (the mean of ``d`` coordinate variances); diagonal: ``log(sigma_j^2) / sqrt(2)``; full and tied: the
        matrix logarithm ``log Sigma`` (log-Euclidean), its diagonal over ``sqrt(2)`` and its upper
        off-diagonal entries as they are, so that the Euclidean norm is ``||log Sigma||_F / sqrt(2)``, which
        rotations of the features leave unchanged."""
        if self.covariance_type == "spherical":
            return np.log(scale) * np.sqrt(n_features / 2.0)
        if not self._matrix:
            return super().log_scale(scale, n_features)
        d = n_features
        values, vectors = np.linalg.eigh(scale.reshape(scale.shape[:-1] + (d, d)))
        log_cov = (vectors * np.log(values)[..., None, :]) @ np.swapaxes(vectors, -1, -2)
        rows, cols = np.triu_indices(d)
        return log_cov[..., rows, cols] * np.where(rows == cols, 1.0 / np.sqrt(2.0), 1.0)

    def exp_scale(self, v, n_features):
        if self.covariance_type == "spherical":
            return np.exp(v / np.sqrt(n_features / 2.0))
        if not self._matrix:
            return super().exp_scale(v, n_features)
        d = n_features
        rows, cols = np.triu_indices(d)
        log_cov = np.zeros(v.shape[:-1] + (d, d))
        log_cov[..., rows, cols] = v * np.where(rows == cols, np.sqrt(2.0), 1.0)
        log_cov[..., cols, rows] = log_cov[..., rows, cols]
        values, vectors = np.linalg.eigh(log_cov)
        cov = (vectors * np.exp(values)[..., None, :]) @ np.swapaxes(vectors, -1, -2)
        return cov.reshape(v.shape[:-1] + (d * d,))

    @property
    def _squares(self):
        """Which squared sums the variances need (see ``fedmm.kernels.gaussian._gaussian_stats``)."""
        return {"identity": "none", "spherical": "total", "diag": "coordinates", "tied": "outer",
                "full": "outer"}[self.covariance_type]

    def estep(self, data, params):
        loglik, *stats = self.kernels.gaussian_estep(data.X, data.offsets, params.weights, params.theta,
                                                     params.scale, self._squares)
        return loglik, GaussianStats(*stats)

    def loglik(self, data, params):
        return self.responsibility_sums(data, params)[0]

    def responsibility_sums(self, data, params):
        # Without the squared sums, the most of an E-step's sums (a quarter of its time at d = 10): the same
        # log-likelihoods and N, neither depends on them.
        return self.kernels.gaussian_estep(data.X, data.offsets, params.weights, params.theta, params.scale, "none")[:2]

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
        return _gradient_step(params.theta, stats.Sx, stats.N[..., None], (eta / n_k[:, None])[..., None])

    def update_scale(self, stats, theta):
        """Variances maximizing Q-hat at means ``theta``: ``sum_i g_ir (x_i - mu_r)^2 / N_r`` (+ reg_covar).

        Full: ``Sigma_r = sum_i g_ir (x_i - mu_r)(x_i - mu_r)^T / N_r + reg I``; tied:
        ``Sigma = sum_r N_r Sigma_r / n_k + reg I``, the same for every component (scikit-learn's M-step).
        """
        K, R, d = theta.shape
        if self.covariance_type == "identity":
            return np.ones((K, R, 1))
        N = stats.N[..., None] + _TINY
        if self._matrix:
            Sxx = stats.Sxx.reshape(K, R, d, d)
            mean_x = stats.Sx / N
            cross = theta[..., :, None] * mean_x[..., None, :]
            cov = Sxx / N[..., None] - cross - np.swapaxes(cross, -1, -2) + theta[..., :, None] * theta[..., None, :]
            if self.covariance_type == "tied":
                share = (N / N.sum(axis=1, keepdims=True))[..., None]
                cov = np.broadcast_to((share * cov).sum(axis=1, keepdims=True), cov.shape)
            cov = 0.5 * (cov + np.swapaxes(cov, -1, -2)) + self.reg_covar * np.eye(d)
            return cov.reshape(K, R, d * d)
        if self.covariance_type == "spherical":  # Sxx holds sum_i g_ir ||x_i||^2: average over coordinates
            # einsum: numpy's reductions over a short last axis are slow.
            var = np.einsum("krj->kr", _centred_squares(stats.Sxx / d, stats.Sx, N, theta))[..., None] / d
        else:
            var = _centred_squares(stats.Sxx, stats.Sx, N, theta)
        np.maximum(var, 0.0, out=var)
        var += self.reg_covar
        return var

    def whitened_sums(self, data, params, radius):
        """Each client's sums of ``g_ir``, ``g_ir z_ir`` and ``g_ir`` times the squares of ``z_ir``, row ``i``'s
        deviation from component ``r`` in the component's own units (``z = P^T (x - mu_r)``, :meth:`whiten`)
        shrunk into the ball of ``radius``: pfl's centred and rescaled statistics (``ExpectationMaximizationGMM``),
        whose part from one row is bounded whatever the row, and relative to each component's spread whatever
        the data's range (a private fit at the level of samples, :mod:`fedmm.privacy`). Squares: ``z^2``
        (diagonal variances), ``||z||^2`` (spherical), ``z z^T`` flattened (full); none for identity ones."""
        g = np.exp(self.log_resp(data, params)[1])
        k = np.repeat(np.arange(data.n_clients), data.n_samples)
        z = self.whiten(data.X[:, None, :] - params.theta[k], params.scale[k])
        norms = np.linalg.norm(z, axis=-1, keepdims=True)
        z *= np.minimum(1.0, radius / np.maximum(norms, np.finfo(float).tiny))
        gz = g[..., None] * z
        if not self.estimates_scale:
            squares = None
        elif self.covariance_type in ("full", "tied"):
            squares = (gz[..., :, None] * z[..., None, :]).reshape(gz.shape[:-1] + (-1,))
        else:
            squares = gz * z if self.covariance_type == "diag" else np.sum(gz * z, axis=-1, keepdims=True)
        starts = data.offsets[:-1]
        return WhitenedSums(*(None if f is None else np.add.reduceat(f, starts, axis=0) for f in (g, gz, squares)))

    def initial_resp(self, X, y, n_components, random_state):
        """Hard labels of one k-means run (greedy k-means++ seeding, then Lloyd; :mod:`fedmm.kmeans`)."""
        uniforms = random_state.random_sample((1, kmeans.n_uniforms(n_components)))
        return one_hot(kmeans.kmeans_labels_clients(X, [0, len(X)], n_components, uniforms), n_components)

    def initial_resp_clients(self, data, n_components, seeds):
        """Every client's k-means labels in one compiled call (:func:`fedmm.kmeans.kmeans_labels_clients`),
        each from its own seed: the numbers :meth:`initial_resp` gives client by client."""
        uniforms = kmeans.seeding_uniforms(seeds, n_components)
        return one_hot(kmeans.kmeans_labels_clients(data.X, data.offsets, n_components, uniforms), n_components)

    def combine_starts(self, starts, mass, n_components, random_state):
        """k-FED (Dennis, Li & Smith, ICML 2021; one-shot federated clustering): the clients' k-means components
        are points weighted by the samples they stand for, which weighted k-means (the best of
        :func:`fedmm.kmeans.n_runs` runs, :func:`fedmm.kmeans.best_kmeans_labels`) puts into ``n_components``
        clusters; a cluster's start is the M-step
        of the rows of its members, from the sums each member's mean and variance stand for
        (:meth:`stats_from_params`): their weighted mean, and the variances within and between them."""
        K, R, d = starts.theta.shape
        labels = kmeans.best_kmeans_labels(starts.theta.reshape(-1, d), n_components, random_state, mass.ravel())
        member = np.eye(n_components)[labels].reshape(K, R, n_components)
        stats = self.stats_from_params(starts, mass)
        pooled = type(stats)(*(None if f is None else np.einsum("krc,kr...->c...", member, f)[None] for f in stats))
        theta, scale = self.m_step(pooled)
        # A cluster that lost every member (rare) keeps a point of its own and a tiny share.
        empty = pooled.N[0] <= 0
        theta[0, empty] = starts.theta.reshape(-1, d)[np.argmax(mass.ravel())]
        scale[0, empty] = scale[0, ~empty].mean(axis=0)
        N = np.maximum(pooled.N, 1e-8 * mass.sum())
        return MixtureParams(N / N.sum(), theta, scale)

    def stats_from_params(self, params, mass):
        """The sums (``N``, ``Sx``, ``Sxx``) of ``mass`` (K, R) samples with the components' means and variances:
        ``Sx = N mu``, ``Sxx = N (Sigma + mu mu^T)`` in the layout of :class:`GaussianStats`; the inverse of the
        M-step (App. E.2), whose maximizer of Q-hat at these sums is ``mu`` and ``Sigma`` again."""
        N, mu = mass, params.theta
        Sx = N[..., None] * mu
        if self.covariance_type == "identity":
            return GaussianStats(N, Sx, None)
        if self._matrix:
            outer = (mu[..., :, None] * mu[..., None, :]).reshape(mu.shape[:-1] + (-1,))
            return GaussianStats(N, Sx, N[..., None] * (params.scale + outer))
        if self.covariance_type == "spherical":
            return GaussianStats(N, Sx, N[..., None] * (mu.shape[-1] * params.scale + (mu ** 2).sum(-1, keepdims=True)))
        return GaussianStats(N, Sx, N[..., None] * (params.scale + mu ** 2))

    def sample(self, theta, scale, labels, random_state, X=None):
        """``x = mu_r + L_r z`` with ``L_r L_r^T = Sigma_r``, ``z ~ N(0, I)``, for each label ``r``."""
        d = theta.shape[-1]
        z = random_state.standard_normal((len(labels), d))
        if self._matrix:
            L = np.linalg.cholesky(scale.reshape(-1, d, d))
            return theta[labels] + np.einsum("nij,nj->ni", L[labels], z)
        return theta[labels] + np.sqrt(scale[labels]) * z

    def precisions_cholesky(self, scale):
        """scikit-learn's ``precisions_cholesky_`` for variances (K, R, s): ``1 / sigma`` (spherical: (K, R);
        diag: (K, R, d)), the upper-triangular ``P`` with ``Sigma^{-1} = P P^T`` (full: (K, R, d, d); tied:
        (K, d, d))."""
        if not self._matrix:
            inverse = 1.0 / np.sqrt(scale)
            return inverse if self.covariance_type == "diag" else inverse[..., 0]
        d = int(round(np.sqrt(scale.shape[-1])))
        P = precision_cholesky(scale.reshape(scale.shape[:-1] + (d, d)))
        return P[:, 0] if self.covariance_type == "tied" else P

    def n_parameters(self, n_components, n_features):
        R, d = n_components, n_features
        var = {"identity": 0, "spherical": R, "diag": R * d, "tied": d * (d + 1) // 2,
               "full": R * d * (d + 1) // 2}
        return R * d + var[self.covariance_type] + R - 1

    def min_component_size(self, p):
        """A variance needs two samples and a full covariance ``d + 1``: with fewer the sample variance is
        singular and the component collapses onto its points, held only by ``reg_covar``. Identity and tied
        covariances have no per-component variance."""
        return {"spherical": 2, "diag": 2, "full": p + 1}.get(self.covariance_type, 0)

    def n_client_scale_parameters(self, n_components, n_features):
        """A tied covariance, ``d (d + 1) / 2`` parameters shared by all of a client's components."""
        return n_features * (n_features + 1) // 2 if self.covariance_type == "tied" else 0


# Every round applies these to (K, R, d) arrays: one compiled pass each, where the numpy expressions made five
# (and at 10^5 clients five fresh 40 MB temporaries, whose page faults cost more than the arithmetic).
@vectorize(cache=True)
def _gradient_step(mu, Sx, N, rate):
    """``mu + rate (Sx - N mu)``: the gradient step of :meth:`GaussianFamily.gradient_step` (``rate = eta / n_k``)."""
    return mu + rate * (Sx - N * mu)


@vectorize(cache=True)
def _centred_squares(Sxx, Sx, N, mu):
    """``Sxx / N - mu (2 Sx / N - mu) = sum_i g_i (x_i - mu)^2 / N``, coordinate by coordinate, from the sums."""
    return Sxx / N - (2.0 * (Sx / N) - mu) * mu
