"""scikit-learn's front door for mixtures of linear regressions on many clients."""

import numpy as np
from sklearn.utils import check_random_state

from .. import _params as P
from ..data import FederatedData
from ..families import RegressionFamily
from ..families.regression import NOISE_MODES
from ..methods import METHODS, GradientStrategy
from ..simulate import make_federated_mor, sample_mor
from ._base import _ARRAY_OR_NONE, _SHARED_CONSTRAINTS, _FederatedMixture
from ._docs import _SHARED_ATTRS_DOC, _SHARED_PARAMS_DOC
from ._registry import Simulation

__all__ = ["FederatedMixtureRegression"]


class FederatedMixtureRegression(_FederatedMixture):
    __doc__ = f"""Mixtures of linear regressions on many clients: per-client proportions and coefficients.

    Parameters
    ----------
    n_components : int, default=1
        Number of regression components ``R``.
    {_SHARED_PARAMS_DOC.strip()}
    fit_intercept : bool, default=True
        Give every component an intercept (the paper's model, eq. (5), has
        none: set False to match it).
    noise_variance : float or {{"shared", "component"}}, default="component"
        ``"component"`` estimates one noise variance per component (flexmix's
        and mixreg's default), ``"shared"`` one per client; a number fixes it,
        in the units of ``y`` (1.0 is the paper's model, eq. (5); ``docs/units.md``).
    precondition : bool, default=True
        Gradient methods: precondition the gradient step of component ``r`` by
        ``(A_r / N_r)^{-1}``, the inverse of its design's second moment, so the
        step cannot overshoot on features that are not ``N(0, I)``
        (:meth:`fedmm.families.RegressionFamily.gradient_step`). False gives
        the paper's plain gradient step.
    weights_init : array-like of shape (n_components,) or (n_clients, n_components), optional
        Initial mixing proportions (uniform by default when ``coef_init`` is given).
    coef_init : array-like of shape (n_components, n_features) or (n_clients, n_components, n_features), optional
        Initial coefficients (intercepts start at 0); when given, they are the
        only start (assumed aligned).

    Attributes
    ----------
    {_SHARED_ATTRS_DOC.strip()}
    coef_ : ndarray of shape (n_clients, n_components, n_features)
    intercept_ : ndarray of shape (n_clients, n_components)
        Zeros when ``fit_intercept=False``.
    noise_variance_ : ndarray of shape (n_clients, n_components)

    Notes
    -----
    Likelihoods are those of ``y`` given ``x`` (as flexmix reports them):
    ``predict_proba``, ``score_samples`` and ``score`` take ``y``, and ``score`` is the mean log-likelihood
    per sample, not R^2; ``predict(X)`` is the prior-weighted mean response.

    scikit-learn's estimator checks pass except nine, which call ``predict_proba(X)`` or
    ``score_samples(X)`` without ``y`` and fail on the missing argument: ``check_estimators_unfitted``,
    ``check_n_features_in_after_fitting``, ``check_estimators_dtypes``, ``check_estimators_pickle``,
    ``check_methods_sample_order_invariance``, ``check_methods_subset_invariance``,
    ``check_dict_unchanged``, ``check_fit_idempotent`` and ``check_fit2d_predict1d``
    (``docs/models.md``; ``tests/test_sklearn_checks.py`` checks that each fails for want of ``y`` only).
    """

    model = "mor"
    simulation = Simulation(make_federated_mor, sample_mor, {"noise_variance": 1.0, "fit_intercept": False})
    _theta_init = "coef_init"
    _family_class = RegressionFamily
    _family_params = ("fit_intercept", "noise_variance", "precondition")
    _parameter_constraints = {**_SHARED_CONSTRAINTS, "fit_intercept": P.boolean,
                              "noise_variance": P.any_of(P.one_of(*NOISE_MODES),
                                                         P.real(0.0, np.inf, low_open=True, high_open=True)),
                              "precondition": P.boolean, "weights_init": _ARRAY_OR_NONE, "coef_init": _ARRAY_OR_NONE}

    def __init__(self, n_components=1, *, method="fedgrem", fit_intercept=True, noise_variance="component",
                 precondition=True, n_init=1, max_iter=500, tol=1e-3, init="auto", alignment="consensus",
                 weights_init=None, coef_init=None, backend="auto", warm_start=False, verbose=0, random_state=None):
        self.n_components = n_components
        self.method = method
        self.fit_intercept = fit_intercept
        self.noise_variance = noise_variance
        self.precondition = precondition
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.alignment = alignment
        self.weights_init = weights_init
        self.coef_init = coef_init
        self.backend = backend
        self.warm_start = warm_start
        self.verbose = verbose
        self.random_state = random_state

    def _check_params(self):
        strategy = super()._check_params()
        if not self.precondition and not isinstance(strategy, GradientStrategy):
            raise ValueError(f"precondition=False changes the gradient step; {type(strategy).__name__} takes "
                             "none. Leave it at its default True or choose a gradient method.")
        return strategy

    def _make_family(self, backend):
        # A method whose coefficients are sparse (sparse-fedgrem) fits in per-feature units: whitening would mix a
        # sparse coefficient vector across every feature (RegressionFamily.units).
        method = METHODS.get(self.method) if isinstance(self.method, str) else self.method
        return RegressionFamily(self.fit_intercept, self.noise_variance, precondition=self.precondition,
                                backend=backend, whiten=not getattr(method, "per_feature_units", False))

    def _publish(self, params):
        d = self.n_features_in_
        self.coef_ = params.theta[..., :d]
        self.intercept_ = params.theta[..., d] if self.fit_intercept else np.zeros(params.weights.shape)
        self.noise_variance_ = params.scale[..., 0]
        center = self._center[0]
        self.center_ = center[:, :d]
        self.center_intercept_ = center[:, d] if self.fit_intercept else np.zeros(len(center))
        centers = np.stack([center for center, _ in self._centers])
        self.centers_ = centers[..., :d]
        self.centers_intercept_ = centers[..., d] if self.fit_intercept else np.zeros(centers.shape[:2])

    def personalize(self, X, y):
        """The mixture of a client unseen at training, from its own rows: no round with the others.

        Its proportions at the best-fitting group's components, then its components as the method fits one
        more client (:meth:`fedmm.algorithms.Strategy.new_client`; FedGrEM's: with few rows the consensus,
        with many near its own EM, :func:`fedmm.algorithms.fedgrem.shrunk_client`).

        Parameters
        ----------
        X : array-like of shape (n, n_features), or a list of them
        y : array-like of shape (n,), or a list of them

        Returns
        -------
        ClientMixture, or a list of them for a list
            ``weights_`` holds the proportions; ``predict``, ``predict_proba``,
            ``score_samples``, ``score`` and ``sample`` evaluate the new client.
        """
        return self._personalize(X, y)

    def fit_predict(self, X, y, groups=None):
        """Fit, then return the most probable component of every training pair ``(x, y)``."""
        proba = self.fit(X, y, groups=groups).predict_proba(X, y, groups=groups)
        return [p.argmax(axis=1) for p in proba] if isinstance(proba, list) else proba.argmax(axis=1)

    def sample(self, X, client=None):
        """Draw responses for the features ``X`` from one client's mixture of regressions.

        Parameters
        ----------
        X : array-like of shape (n, n_features)
        client : client id or ClientMixture, optional
            Whose mixture; may be left out when the model has one client.

        Returns
        -------
        y : ndarray of shape (n,)
            In the data's units.
        labels : ndarray of shape (n,)
            The component each response came from.
        """
        params = self._client_params(client)
        data = FederatedData.from_input([X], None, n_features=self.n_features_in_, model=type(self).__name__,
                                        require_y=False)
        self._check_feature_names(data.feature_names)
        labels = self._sample_labels(params, len(data.X))
        return self._family.sample(params.theta[0], params.scale[0], labels, check_random_state(self.random_state),
                                   X=self._family.design(data.X)), labels

    def fit(self, X, y, groups=None):
        """Estimate every client's mixture of regressions.

        Parameters
        ----------
        X : list of array-like of shape (n_k, n_features), or array-like of shape (n, n_features)
            Float32 arrays are stored and read in float32, anything else in float64 (as for
            :meth:`FederatedGaussianMixture.fit`).
        y : list of array-like of shape (n_k,), or array-like of shape (n,)
        groups : array-like of shape (n,), optional
            The client id of every row when ``X`` is one array (without it, the array is one client). In
            scikit-learn's searches and cross-validation, turn metadata routing on and pass ``groups`` to the
            search: the estimator requests them (``docs/selection.md``, "Tuning with scikit-learn").

        Returns
        -------
        self
        """
        return self._fit(X, y, groups)

    def predict(self, X, client=None, groups=None):
        """Prior-weighted mean response ``sum_r w_r x^T theta_r`` of every sample.

        Parameters
        ----------
        X : list of arrays, or array
        Data of fitted clients as a list of one array per client (in the fitted
        order), one array with ``client=`` (the client id whose parameters to
        use), or one array with ``groups=`` (each row's client id). Results come
        back in the same layout.
        """
        data, params, unpack = self._prepare(X, None, client, groups, require_y=False)
        owner = np.repeat(np.arange(data.n_clients), data.n_samples)
        coef = np.einsum("kr,krp->kp", params.weights, params.theta)
        return unpack(np.einsum("np,np->n", data.X, coef[owner]))

    def predict_proba(self, X, y, client=None, groups=None):
        """Posterior membership of every (x, y) pair, shape (n, n_components) per client."""
        return self._predict_proba(X, y, client, groups)

    def score_samples(self, X, y, client=None, groups=None):
        """Log-density of ``y`` given ``x`` under the client's mixture, per sample."""
        return self._score_samples(X, y, client, groups)

    def score(self, X, y, client=None, groups=None):
        """Mean log-likelihood per sample of ``y`` given ``x`` (not R^2).

        With ``groups``, rows of clients the model was not fitted on are scored as new clients, through
        :meth:`personalize` (as :meth:`FederatedGaussianMixture.score`)."""
        return self._score(X, y, client, groups)

    def bic(self, X, y, client=None, groups=None):
        """Bayesian information criterion of the given clients' data (lower is better)."""
        return self._bic(X, y, client, groups)

    def icl(self, X, y, client=None, groups=None):
        """Integrated completed likelihood (BIC plus twice the classification entropy; lower is better)."""
        return self._icl(X, y, client, groups)

    def aic(self, X, y, client=None, groups=None):
        """Akaike information criterion of the given clients' data (lower is better)."""
        return self._aic(X, y, client, groups)
