"""scikit-learn's front door for Gaussian mixtures on many clients."""

import numpy as np
from sklearn.utils import check_random_state

from .. import _params as P
from ..families import GaussianFamily
from ..families.gaussian import COVARIANCE_TYPES
from ..privacy import DifferentialPrivacy
from ._base import _ARRAY_OR_NONE, _SHARED_ATTRS_DOC, _SHARED_CONSTRAINTS, _SHARED_PARAMS_DOC, _FederatedMixture

__all__ = ["FederatedGaussianMixture"]


class FederatedGaussianMixture(_FederatedMixture):
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

    _theta_init = "means_init"
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

    def _make_family(self, backend):
        return GaussianFamily(self.covariance_type, self.reg_covar, backend=backend)

    def _publish(self, params):
        self.means_ = params.theta
        K, R, d = params.theta.shape
        scale = params.scale
        kind = self.covariance_type
        self.covariances_ = scale if kind == "diag" else scale.reshape(K, R, d, d) if kind == "full" else \
            scale[:, 0].reshape(K, d, d) if kind == "tied" else scale[..., 0]
        self.precisions_cholesky_ = self._family.precisions_cholesky(scale)
        P = self.precisions_cholesky_
        self.precisions_ = P @ np.swapaxes(P, -1, -2) if kind in ("full", "tied") else P ** 2
        self.center_ = self._center[0]
        self.centers_ = np.stack([center for center, _ in self._centers])

    def personalize(self, X):
        """The mixture of a client unseen at training, from its own rows: no round with the others.

        Its proportions at the best-fitting group's components, then its components as the method fits one
        more client (:meth:`fedmm.algorithms.Strategy.new_client`; FedGrEM's: with few rows the consensus,
        with many near its own EM, :func:`fedmm.algorithms.fedgrem.shrunk_client`).

        Parameters
        ----------
        X : array-like of shape (n, n_features), or a list of them

        Returns
        -------
        ClientMixture, or a list of them for a list
            ``weights_`` holds the proportions; ``predict``, ``predict_proba``,
            ``score_samples``, ``score`` and ``sample`` evaluate the new client
            (also as ``model.predict(X, client=new_client)``).
        """
        return self._personalize(X, None)

    def sample(self, n_samples=1, client=None):
        """Draw from one client's mixture.

        Parameters
        ----------
        n_samples : int, default=1
        client : client id or ClientMixture, optional
            Whose mixture; may be left out when the model has one client.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            In the data's units, in random order (scikit-learn sorts by component).
        labels : ndarray of shape (n_samples,)
            The component each sample came from.
        """
        params = self._client_params(client)
        labels = self._sample_labels(params, n_samples)
        return self._family.sample(params.theta[0], params.scale[0], labels,
                                   check_random_state(self.random_state)), labels

    def fit(self, X, y=None, groups=None):
        """Estimate every client's mixture.

        Parameters
        ----------
        X : list of array-like of shape (n_k, n_features), or array-like of shape (n, n_features)
            One array per client, or all samples with ``groups``. Float32 arrays are stored and read
            in float32 (half the memory; sums and parameters in float64), anything else in float64.
        y : ignored
        groups : array-like of shape (n,), optional
            The client id of every row when ``X`` is one array (without it, the array is one client). In
            scikit-learn's searches and cross-validation, turn metadata routing on and pass ``groups`` to the
            search: the estimator requests them (``docs/selection.md``, "Tuning with scikit-learn").

        Returns
        -------
        self
        """
        return self._fit(X, None, groups)

    def fit_predict(self, X, y=None, groups=None):
        """Fit, then return the component labels of the training data."""
        return self.fit(X, groups=groups).predict(X, groups=groups)

    def predict(self, X, client=None, groups=None):
        """Most probable component of every sample.

        Parameters
        ----------
        X : list of arrays, or array
        Data of fitted clients as a list of one array per client (in the fitted
        order), one array with ``client=`` (the client id whose parameters to
        use), or one array with ``groups=`` (each row's client id). Results come
        back in the same layout.
        """
        proba = self._predict_proba(X, None, client, groups)
        return [p.argmax(axis=1) for p in proba] if isinstance(proba, list) else proba.argmax(axis=1)

    def predict_proba(self, X, client=None, groups=None):
        """Posterior probability of each component for every sample, shape (n, n_components) per client."""
        return self._predict_proba(X, None, client, groups)

    def score_samples(self, X, client=None, groups=None):
        """Log-density ``log sum_r w_r N(x; mu_r, Sigma_r)`` of every sample under its client's mixture."""
        return self._score_samples(X, None, client, groups)

    def score(self, X, y=None, client=None, groups=None):
        """Mean log-likelihood per sample over all the given samples.

        With ``groups``, rows of clients the model was not fitted on (held out by ``GroupKFold``, say) are
        scored as new clients: each one's proportions fitted to its rows (:meth:`personalize`), its components
        the consensus's (``docs/selection.md``)."""
        return self._score(X, None, client, groups)

    def bic(self, X, client=None, groups=None):
        """Bayesian information criterion of the given clients' data (lower is better).

        Parameter counts: see ``docs/models.md`` (per client for the local
        methods, once for the pooled ones, shared components for FedEM, and
        for FedGrEM once per component on the consensus plus once per client
        component off it).
        """
        return self._bic(X, None, client, groups)

    def icl(self, X, client=None, groups=None):
        """Integrated completed likelihood (BIC plus twice the classification entropy; lower is better)."""
        return self._icl(X, None, client, groups)

    def aic(self, X, client=None, groups=None):
        """Akaike information criterion of the given clients' data (lower is better)."""
        return self._aic(X, None, client, groups)
