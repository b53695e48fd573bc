"""scikit-learn's front door for Gaussian mixtures on many clients."""

import numpy as np

from .. import _params as P
from ..families import GaussianFamily
from ..families.gaussian import COVARIANCE_TYPES
from ..privacy import DifferentialPrivacy
from ..simulate import make_federated_gmm, sample_gmm
from ._base import _ARRAY_OR_NONE, _SHARED_CONSTRAINTS
from ._docs import _SHARED_ATTRS_DOC, _SHARED_PARAMS_DOC
from ._registry import Simulation
from .mixture import FederatedMixture

__all__ = ["FederatedGaussianMixture"]


class FederatedGaussianMixture(FederatedMixture):
    __doc__ = f"""Gaussian mixtures on many clients: per-client proportions and means.

    Parameters
    ----------
    n_components : int, default=1
        Number of mixture components ``R``.
    {_SHARED_PARAMS_DOC.strip()}
    covariance_type : {{"identity", "spherical", "diag", "tied", "full"}}, default="diag"
        ``"diag"``, ``"spherical"``, ``"full"`` (any covariance per component)
        and ``"tied"`` (one covariance per client, shared by its components)
        estimate them as scikit-learn's ``GaussianMixture`` does (an extension
        beyond the paper's theory; ``docs/models.md``); ``"identity"`` is the
        model of FedGrEM eq. (4), unit variances in the data's own units, under
        which its theory holds (``docs/units.md``).
    reg_covar : float, default=1e-6
        Added to estimated variances (the diagonal of full and tied
        covariances), in standard units (a fraction of each feature's pooled
        variance), so that it does not depend on the data's units.
    weights_init : array-like of shape (n_components,) or (n_clients, n_components), optional
        Initial mixing proportions (uniform by default when ``means_init`` is given).
    means_init : array-like of shape (n_components, n_features) or (n_clients, n_components, n_features), optional
        Initial means; when given, they are the only start (assumed aligned).
    privacy : fedmm.privacy.DifferentialPrivacy, optional
        Differential privacy for the fit, of each client (``method="fedem"`` or ``"fedgrem"``) or of each row
        (``unit="sample"``: ``"fedem"`` or ``"pooled-em"``), noise on the aggregate or on each client's
        message (``docs/privacy.md``): the fit then runs exactly the rounds ``privacy`` calibrates its noise for
        (``n_iter_``) from a public start (or ``means_init``), and ``privacy_spent_`` says what they spent.
        Each client first clips its rows into the privacy's ``bounds``, with a warning of how many were outside
        (:class:`fedmm.privacy.OutsideBoundsWarning`); the fit reports no log-likelihood (none is released) and
        ``converged_`` is False (no stopping rule). None (the default) runs none of it.

    Attributes
    ----------
    {_SHARED_ATTRS_DOC.strip()}
    means_ : ndarray of shape (n_clients, n_components, n_features)
    covariances_ : ndarray
        Shape (n_clients, n_components) for "identity" (all ones) and
        "spherical", (n_clients, n_components, n_features) for "diag",
        (n_clients, n_components, n_features, n_features) for "full",
        (n_clients, n_features, n_features) for "tied".
    precisions_cholesky_ : ndarray
        scikit-learn's, per client: ``1 / sigma`` for "spherical" and "diag",
        the upper-triangular ``P`` with ``Sigma^{-1} = P P^T`` for "full" and "tied".
    precisions_ : ndarray
        The inverses of ``covariances_``, of their shape (scikit-learn's).

    Examples
    --------
    >>> from fedmm import FederatedGaussianMixture
    >>> from fedmm.simulate import make_federated_gmm
    >>> X, truth = make_federated_gmm(n_clients=3, n_samples=200, random_state=0)
    >>> gm = FederatedGaussianMixture(n_components=5, random_state=0).fit(X)
    >>> gm.means_.shape
    (3, 5, 10)
    """

    model = "gmm"
    simulation = Simulation(make_federated_gmm, sample_gmm, {"covariance_type": "identity"})
    _family_class = GaussianFamily
    _family_params = ("covariance_type", "reg_covar")
    _parameter_constraints = {**_SHARED_CONSTRAINTS, "covariance_type": P.one_of(*COVARIANCE_TYPES),
                              "reg_covar": P.real(0.0, np.inf, high_open=True), "weights_init": _ARRAY_OR_NONE,
                              "means_init": _ARRAY_OR_NONE,
                              "privacy": P.any_of(P.none, P.instance(DifferentialPrivacy,
                                                                     text="a fedmm.privacy.DifferentialPrivacy"))}

    def __init__(self, n_components=1, *, method="fedgrem", covariance_type="diag", n_init=1, max_iter=500,
                 tol=1e-3, init="auto", alignment="consensus", reg_covar=1e-6, weights_init=None, means_init=None,
                 backend="auto", warm_start=False, verbose=0, random_state=None, privacy=None):
        self.n_components = n_components
        self.method = method
        self.covariance_type = covariance_type
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.alignment = alignment
        self.reg_covar = reg_covar
        self.weights_init = weights_init
        self.means_init = means_init
        self.backend = backend
        self.warm_start = warm_start
        self.verbose = verbose
        self.random_state = random_state
        self.privacy = privacy

    def _publish(self, params):
        super()._publish(params)
        K, R, d = params.theta.shape
        scale = params.scale
        kind = self.covariance_type
        self.covariances_ = scale if kind == "diag" else scale.reshape(K, R, d, d) if kind == "full" else \
            scale[:, 0].reshape(K, d, d) if kind == "tied" else scale[..., 0]
        self.precisions_cholesky_ = self._family.precisions_cholesky(scale)
        P = self.precisions_cholesky_
        self.precisions_ = P @ np.swapaxes(P, -1, -2) if kind in ("full", "tied") else P ** 2
