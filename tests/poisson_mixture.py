"""A model family written outside fedmm, in one file, with no edit to fedmm: the example of docs/extending.md.

Mixtures of multivariate Poisson counts: component ``r`` draws each of the ``d`` coordinates of a row on its own,
``x_j ~ Poisson(lambda_rj)``. The family gives the statistics (the E-step's sums ``N`` and ``Sx``, the closed-form
M-step ``lambda_r = Sx_r / N_r``, the gradient step), a k-means start in the counts' square roots, draws and a
parameter count; its units are the identity (counts have no shift or scale to standardize), and its kernels are
numpy's. The estimator names the model, ``"poisson"``: being defined registers it, so FedEM, FedGrEM and the pooled
methods fit it in one process and on Flower's clients as they fit fedmm's own models.
"""

from typing import NamedTuple

import numpy as np
from scipy.special import gammaln, logsumexp

from fedmm import kmeans
from fedmm.estimators import FederatedMixture
from fedmm.families import Family, MixtureParams

TINY = 1e-10   # the smallest rate: a component that saw only zeros in a coordinate keeps a finite log-density


class PoissonStats(NamedTuple):
    """Per-client sums: ``N`` (K, R), the responsibilities' sums, and ``Sx = sum_i g_ir x_i`` (K, R, d)."""

    N: np.ndarray
    Sx: np.ndarray


class PoissonFamily(Family):
    """Components of independent Poisson coordinates: ``theta_r`` holds the rates ``lambda_r`` (d,), ``scale``
    ones (the variance is the rate itself)."""

    def _log_prob(self, X, rates):
        """``log p_r(x_i)`` (n, R) of rows ``X`` under components of ``rates`` (R, d)."""
        return X @ np.log(rates).T - rates.sum(axis=1) - gammaln(X + 1.0).sum(axis=1, keepdims=True)

    def log_resp(self, data, params):
        with np.errstate(divide="ignore"):   # a component of weight 0 has log-posterior -inf
            log_w = np.log(params.weights)
        blocks = [self._log_prob(np.asarray(data.X[a:b], dtype=float), params.theta[k]) + log_w[k]
                  for k, (a, b) in enumerate(zip(data.offsets[:-1], data.offsets[1:]))]
        weighted = np.concatenate(blocks)
        log_norm = logsumexp(weighted, axis=1)
        return log_norm, weighted - log_norm[:, None]

    def stats_from_resp(self, data, resp):
        X = np.asarray(data.X, dtype=float)
        cuts = list(zip(data.offsets[:-1], data.offsets[1:]))
        return PoissonStats(np.stack([resp[a:b].sum(axis=0) for a, b in cuts]),
                            np.stack([resp[a:b].T @ X[a:b] for a, b in cuts]))

    def estep(self, data, params):
        log_norm, log_resp = self.log_resp(data, params)
        loglik = np.array([log_norm[a:b].sum() for a, b in zip(data.offsets[:-1], data.offsets[1:])])
        return loglik, self.stats_from_resp(data, np.exp(log_resp))

    def m_step(self, stats):
        """``lambda_r = Sx_r / N_r``, the maximizer of Q-hat."""
        rates = np.maximum(stats.Sx / (stats.N[..., None] + TINY), TINY)
        return rates, self.update_scale(stats, rates)

    def penalized_m_step(self, stats, target, strength):
        N = stats.N[..., None] + TINY
        return np.maximum((stats.Sx + strength * N * target) / (N * (1.0 + strength)), TINY)

    def gradient_step(self, stats, params, eta, n_k):
        """``lambda + eta (Sx - N lambda) / n_k``: the gradient of Q-hat, ``(Sx / lambda - N) / n_k``, times the
        rate (the variance), so that ``eta = n_k / N`` is the M-step."""
        rate = (eta / n_k[:, None])[..., None]
        return np.maximum(params.theta + rate * (stats.Sx - stats.N[..., None] * params.theta), TINY)

    def update_scale(self, stats, theta):
        return np.ones(theta.shape[:-1] + (1,))

    def initial_resp(self, X, y, n_components, random_state):
        """One k-means run on the counts' square roots (which make a Poisson's spread about the same at every rate)."""
        uniforms = random_state.random_sample((1, kmeans.n_uniforms(n_components)))
        labels = kmeans.kmeans_labels_clients(np.sqrt(X), [0, len(X)], n_components, uniforms)
        return np.eye(n_components)[labels]

    def combine_starts(self, starts, mass, n_components, random_state):
        """The clients' components, weighted by the rows they stand for, in ``n_components`` k-means clusters (of
        their rates' square roots): each cluster's start is its members' mass-weighted rates."""
        K, R, d = starts.theta.shape
        labels = kmeans.best_kmeans_labels(np.sqrt(starts.theta.reshape(-1, d)), n_components, random_state,
                                           mass.ravel())
        member = np.eye(n_components)[labels] * mass.reshape(-1, 1)               # (K R, n_components)
        N = np.maximum(member.sum(axis=0), 1e-8 * mass.sum())
        rates = np.maximum(member.T @ starts.theta.reshape(-1, d) / N[:, None], TINY)
        return MixtureParams((N / N.sum())[None], rates[None], np.ones((1, n_components, 1)))

    def sample(self, theta, scale, labels, random_state, X=None):
        return random_state.poisson(theta[labels]).astype(float)

    def n_parameters(self, n_components, n_features):
        return n_components * n_features + n_components - 1


class FederatedPoissonMixture(FederatedMixture):
    """Mixtures of multivariate Poisson counts on many clients (``model="poisson"``); ``means_`` holds the rates.

    Parameters
    ----------
    n_components : int, default=1
    method, n_init, max_iter, tol, init, alignment, weights_init, means_init, backend, warm_start, verbose, \
random_state
        As for :class:`fedmm.FederatedGaussianMixture`.
    """

    model = "poisson"
    _family_class = PoissonFamily

    def __init__(self, n_components=1, *, method="fedgrem", n_init=1, max_iter=500, tol=1e-3, init="auto",
                 alignment="consensus", weights_init=None, means_init=None, backend="auto", warm_start=False,
                 verbose=0, random_state=None):
        self.n_components = n_components
        self.method = method
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.alignment = alignment
        self.weights_init = weights_init
        self.means_init = means_init
        self.backend = backend
        self.warm_start = warm_start
        self.verbose = verbose
        self.random_state = random_state


def make_poisson_clients(n_clients=4, n_samples=300, random_state=0):
    """Counts of ``n_clients`` clients, each a mixture of the same three rate vectors (d = 4) in its own
    proportions: ``(X, rates)``."""
    rng = np.random.RandomState(random_state)
    rates = np.array([[1.0, 8.0, 2.0, 12.0], [9.0, 1.0, 10.0, 2.0], [4.0, 4.0, 0.5, 6.0]])
    X = []
    for _ in range(n_clients):
        labels = rng.choice(3, size=n_samples, p=rng.dirichlet(5.0 * np.ones(3)))
        X.append(rng.poisson(rates[labels]).astype(float))
    return X, rates
