"""What every component family shares: the parameter container and the interface.

A family owns the statistics of one component model ``p_r(.; theta)``
(FedGrEM Sec. 2.1, eq. (1)): log-density, posterior, gradient of
``Q-hat`` (Sec. 2.3), closed-form M-step and parameter counts. Algorithms only
call the methods below, so a new family never touches an algorithm.
"""

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

from ..kernels import get_kernels
from ..robust import client_median
from ..units import Units

# Added to responsibility sums before dividing, as scikit-learn does, so that
# an empty component gives a finite (if meaningless) estimate instead of NaN.
_TINY = 10 * np.finfo(np.float64).eps


class MixtureParams(NamedTuple):
    """Per-client mixture parameters.

    Attributes
    ----------
    weights : ndarray of shape (K, R)
        Mixing proportions ``w_r^{(k)}``.
    theta : ndarray of shape (K, R, p)
        Component parameters ``theta_r^{(k)}`` (means, or regression coefficients).
    scale : ndarray of shape (K, R, s)
        Variances: component variances of a GMM (``s`` = 1 or ``d``) or the
        noise variance of a regression component (``s`` = 1).
    """

    weights: np.ndarray
    theta: np.ndarray
    scale: np.ndarray

    def take(self, index):
        """Parameters of the clients in ``index`` (in that order)."""
        return MixtureParams(*(a[index] for a in self))

    def where(self, mask, other):
        """Client by client: these parameters where ``mask`` (K,) is true, ``other``'s elsewhere."""
        return MixtureParams(*(np.where(mask.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
                               for a, b in zip(self, other)))

    def broadcast(self, n_clients):
        """The parameters of a single client for ``n_clients`` clients, as read-only views of its row: copies cost
        84 MB a broadcast at 100,000 clients, and the pooled start's ten candidates and their runs' last rounds
        held 1.6 GB of them (issue 60). Whatever changes a client's row makes a new array."""
        return MixtureParams(*(np.broadcast_to(a[:1], (n_clients,) + a.shape[1:]) for a in self))

    def permute(self, perms):
        """Relabel components: client ``k``'s component ``r`` becomes its old ``perms[k, r]``."""
        rows = np.arange(len(perms))[:, None]
        return MixtureParams(*(a[rows, perms] for a in self))

    def is_finite(self):
        """(K,) bool: whether each client's parameters are all finite."""
        return np.all([np.isfinite(a).reshape(len(a), -1).all(axis=1) for a in self], axis=0)


def pool_stats(stats):
    """Sum per-client statistics over clients (leading axis kept, of length 1)."""
    return type(stats)(*(None if f is None else f.sum(axis=0, keepdims=True) for f in stats))


def combine_by_label(starts, mass):
    """Clients' starts (K', R, ...) in one labelling combined into one (a single client's row): component ``r`` the
    average of every client's component ``r`` (its location and scale) weighted by ``mass`` (K', R), the rows it
    stands for, the proportions the masses' shares."""
    total = mass.sum(axis=0)
    share = mass / np.maximum(total, _TINY)
    return MixtureParams((total / total.sum())[None], np.einsum("kr,kr...->r...", share, starts.theta)[None],
                         np.einsum("kr,kr...->r...", share, starts.scale)[None])


def one_hot(labels, n_components):
    """Hard responsibilities (n, R) from labels (n,)."""
    resp = np.zeros((len(labels), n_components))
    resp[np.arange(len(labels)), labels] = 1.0
    return resp


class Family(ABC):
    """Interface of a component family (see :class:`GaussianFamily`, :class:`RegressionFamily`, and a family of one's
    own in ``docs/extending.md``: its estimator, a :class:`fedmm.estimators.FederatedMixture` naming its ``model``).

    Statistics are per-client sums over samples, as a NamedTuple whose first
    field is ``N`` (K, R), the responsibility sums; so ``w_hat = N / n_k`` (the
    M-step for the mixing proportions in FedGrEM Algorithm 1) is the same for
    every family.
    """

    needs_y = False
    #: Whether the family has a private form for :mod:`fedmm.privacy` (``whiten``, ``unwhiten``, ``whitened_sums``,
    #: ``unit_scale``, ``estimates_scale``: :class:`GaussianFamily`'s); a private fit of any other is refused.
    private_form = False
    #: Whether each component has its own estimated variance(s) (FedGrEM pools them with the means).
    scale_per_component = False

    def __init__(self, backend="numpy"):
        get_kernels(backend)  # a wrong or unavailable backend fails here, not at the first E-step
        self.backend = backend

    @property
    def kernels(self):
        """The kernel functions of :attr:`backend` (:func:`fedmm.kernels.get_kernels`), resolved on use so that
        fitted estimators survive ``pickle`` and ``deepcopy`` and load on a machine with other backends. A family
        with kernels of its own overrides it (or computes :meth:`estep` and :meth:`log_resp` without it)."""
        return get_kernels(self.backend)

    def design(self, X):
        """The matrix the component parameters act on (``X`` itself unless overridden)."""
        return X

    def design_theta(self, theta):
        """User-given parameters (..., n_features) in the space ``theta`` lives in (..., p)."""
        return theta

    def param_dim(self, n_features):
        """``p``, the length of one ``theta_r``, for ``n_features`` input features."""
        return n_features

    @classmethod
    def moment_shapes(cls, n_features):
        """The shapes of one client's sums for the units (:func:`fedmm.units.client_sums`), which a server checks
        every client's reply against (:mod:`fedmm.flower`): ``n``, ``sum_x`` and each feature's ``sum_xx``, and
        for a model of responses the whole ``sum x x^T`` with ``sum_y`` and ``sum_yy``."""
        d = n_features
        if cls.needs_y:
            return {"n": (1,), "sum_x": (d,), "sum_xx": (d, d), "sum_y": (1,), "sum_yy": (1,)}
        return {"n": (1,), "sum_x": (d,), "sum_xx": (d,)}

    def units(self, moments):
        """The change of units (:class:`fedmm.units.Units`) this model is equivariant under, from the pooled
        :class:`fedmm.units.Moments`: the estimators fit in these standard units (``docs/units.md``). None (the
        identity) unless overridden, for a model with no such map (counts, say)."""
        return Units.identity(len(moments.mean))

    def to_original(self, params, units):
        """Parameters fitted in standard units, mapped back to the data's units (unchanged under the identity)."""
        return params

    def to_internal(self, theta, units):
        """User-given component parameters (..., p) in the data's units, mapped into standard units."""
        return theta

    def params_to_internal(self, params, units):
        """Fitted parameters in the data's units mapped into standard units, the inverse of
        :meth:`to_original` (a warm start)."""
        return params._replace(theta=self.to_internal(params.theta, units),
                               scale=self.scale_to_internal(params.scale, units))

    def scale_to_internal(self, scale, units):
        """Variances in the data's units mapped into standard units (:meth:`to_original`'s, inverted)."""
        return scale

    @abstractmethod
    def estep(self, data, params):
        """E-step of all clients: ``(loglik (K,), statistics)``."""

    def loglik(self, data, params):
        """(K,) every client's log-likelihood at its row of ``params``: :meth:`estep`'s, without the sums where the
        family can leave them out."""
        return self.estep(data, params)[0]

    def responsibility_sums(self, data, params):
        """``(loglik (K,), N (K, R))``: :meth:`estep`'s log-likelihoods and responsibility sums alone, all that a
        refit of the proportions needs (:func:`fedmm.clients.fit_weights`), without the other sums where the family
        can leave them out."""
        loglik, stats = self.estep(data, params)
        return loglik, stats.N

    @abstractmethod
    def log_resp(self, data, params):
        """Per-sample log-likelihood (n,) and log posteriors (n, R)."""

    @abstractmethod
    def stats_from_resp(self, data, resp):
        """Statistics of all clients for given responsibilities (n, R)."""

    @abstractmethod
    def m_step(self, stats):
        """Closed-form maximizer of ``Q-hat``: ``(theta, scale)`` per client."""

    @abstractmethod
    def penalized_m_step(self, stats, target, strength):
        """Maximizer of ``Q-hat - (strength N_r / (2 sigma_r^2)) ||theta_r - target_r||^2``: the M-step
        under a Gaussian prior centred at ``target`` (K, R, p) (TGMM, see :mod:`fedmm.algorithms.tgmm`)."""

    @abstractmethod
    def gradient_step(self, stats, params, eta, n_k):
        """``theta + eta * d/dtheta Q-hat`` per client (FedGrEM Algorithm 1, M-step)."""

    @abstractmethod
    def update_scale(self, stats, theta):
        """Variances that maximize ``Q-hat`` for fixed ``theta``."""

    @abstractmethod
    def initial_resp(self, X, y, n_components, random_state):
        """Starting responsibilities (n, R) for one client's (or the pooled) data."""

    @abstractmethod
    def combine_starts(self, starts, mass, n_components, random_state):
        """One start (MixtureParams of one client's row) from clients' own starts (K', R, ...), each component
        standing for ``mass`` (K', R) samples: the server's combination of the clients' family starts
        (:func:`fedmm.initialization.clustered_start`)."""

    def initial_resp_clients(self, data, n_components, seeds):
        """Every client's starting responsibilities (n, R) from its own seed: :meth:`initial_resp` on its
        rows with ``RandomState(seed)``, client by client (families override it with a batched version
        that gives the same numbers)."""
        return np.concatenate([self.initial_resp(*data.client(k), n_components, np.random.RandomState(seed))
                               for k, seed in enumerate(seeds)])

    def coordinate_variances(self, scale):
        """The variances (K, R, s') that set FedGrEM's noise units per coordinate (:func:`noise_scale`
        in :mod:`fedmm.algorithms.fedgrem`): the family's variances themselves unless overridden."""
        return scale

    def central_metric(self, stats):
        """The metric ``G_kr`` (K, R, p, p) of the parameters in FedGrEM's central problem
        (:func:`fedmm.algorithms.central.central_update`), or ``None`` for the paper's Euclidean norm (the default)."""
        return None

    def center_scale(self, scale):
        """The consensus's variances from the clients' (K, R, s): their coordinate-wise median."""
        return client_median(scale)

    def log_scale(self, scale, n_features):
        """Variances (..., s) as log-variances in noise units (..., q): coordinates whose sampling sd is
        about ``1 / sqrt(N_r)`` at every scale, so that FedGrEM's central update can pool them as it pools
        the means (``pool_variances="robust"``). A variance estimated from ``N`` samples has a logarithm
        with sd ``sqrt(2 / N)``, so ``v = log(sigma^2) / sqrt(2)``."""
        return np.log(scale) / np.sqrt(2.0)

    def exp_scale(self, v, n_features):
        """The inverse of :meth:`log_scale`."""
        return np.exp(np.sqrt(2.0) * v)

    def min_component_size(self, p):
        """The effective sample size ``N_kr`` below which a component with ``p`` parameters ``theta_r`` (the
        :meth:`param_dim`) is singular, its estimate then set by the regularizer (``reg_covar``,
        ``reg_coef``), not by the data; 0 where no size is too small."""
        return 0

    def n_client_scale_parameters(self, n_components, n_features):
        """Parameters of the variances shared by all of a client's components (counted per client, not per
        component, by the information criteria); none unless overridden."""
        return 0

    def sample_labels(self, weights, n, random_state):
        """``n`` component labels drawn from one client's proportions ``weights`` (R,)."""
        return random_state.choice(len(weights), size=n, p=weights / weights.sum())

    @abstractmethod
    def sample(self, theta, scale, labels, random_state, X=None):
        """One client's draws given component ``labels`` (n,): features for a Gaussian mixture, responses
        given the design ``X`` for a regression; ``theta`` (R, p) and ``scale`` (R, s) of that client."""

    @abstractmethod
    def n_parameters(self, n_components, n_features):
        """Free parameters of one mixture, mixing proportions included."""
