"""The front door of a mixture over rows ``x``: Gaussian mixtures, and a family of your own (``docs/extending.md``)."""

import numpy as np
from sklearn.utils import check_random_state

from ._base import _ARRAY_OR_NONE, _SHARED_CONSTRAINTS, _FederatedMixture

__all__ = ["FederatedMixture"]


class FederatedMixture(_FederatedMixture):
    """A mixture of a component family over rows ``x`` on many clients: per-client proportions and components.

    The base of :class:`fedmm.FederatedGaussianMixture`, and of a model of your own: a subclass names its
    ``model`` (registered by that name in :data:`fedmm.estimators.MODELS`, where Flower's clients find it), its
    family's class (``_family_class``, a :class:`fedmm.families.Family`) and the constructor arguments that
    define the family (``_family_params``); its constructor stores the arguments of ``_parameter_constraints``
    (the estimators' shared ones, ``weights_init`` and ``means_init``, and its family's). The fit, the
    evaluation and the new clients below are then the estimators' own, and the fitted components are
    ``means_`` (``docs/extending.md``).
    """

    _theta_init = "means_init"
    _parameter_constraints = {**_SHARED_CONSTRAINTS, "weights_init": _ARRAY_OR_NONE, "means_init": _ARRAY_OR_NONE}

    def _make_family(self, backend):
        return self._family_class(**{name: getattr(self, name) for name in self._family_params}, backend=backend)

    def _publish(self, params):
        self.means_ = params.theta
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
        """Log-density ``log sum_r w_r p_r(x)`` of every sample under its client's mixture."""
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
