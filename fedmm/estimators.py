"""scikit-learn front doors: :class:`FederatedGaussianMixture` and :class:`FederatedMixtureRegression`.

The estimators only validate, restart, and translate between the user's data
layout and the internal one; the estimation itself is the chosen
:mod:`fedmm.algorithms` strategy over a :mod:`fedmm.families` family.
"""

import copy
import warnings
from abc import ABC, abstractmethod
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from . import _params as P
from .alignment import ALIGNMENT_METHODS
from .data import FederatedData, check_component_sizes, check_components, check_empty_components
from .clients import LocalClients, fit_weights
from .engine import Participation, Progress, fit_restarts
from .families import GaussianFamily, MixtureParams, RegressionFamily
from .families.gaussian import COVARIANCE_TYPES
from .families.regression import NOISE_MODES
from .initialization import INITS, align_params, make_starts
from .kernels import BACKENDS, resolve_backend
from .methods import METHODS, GradientStrategy, Method, make_method
from .robust import client_median

#: Constraints on the arguments both estimators share (:mod:`fedmm._params`), checked first thing in ``fit``.
_SHARED_CONSTRAINTS = {
    "n_components": P.integer(1),
    "method": P.any_of(P.one_of(*METHODS), P.instance(Method, text="a method object (fedmm.methods)")),
    "n_init": P.integer(1),
    "max_iter": P.integer(1),
    "tol": P.real(0.0, np.inf, high_open=True),
    "init": P.one_of(*INITS),
    "alignment": P.any_of(P.one_of(*ALIGNMENT_METHODS), P.none),
    "backend": P.one_of(*BACKENDS),
    "verbose": P.integer(0),
    "verbose_interval": P.integer(1),
    "random_state": P.any_of(P.none, P.integer(0, 2 ** 32 - 1),
                             P.instance(np.random.RandomState, text="a numpy RandomState")),
}
#: What each estimator's initial values may be before they meet the data (shapes are checked against it).
_ARRAY_OR_NONE = P.any_of(P.none, P.instance(list, tuple, np.ndarray, text="an array-like"))

__all__ = ["FederatedGaussianMixture", "FederatedMixtureRegression", "ClientMixture"]


class _FederatedMixture(BaseEstimator, ABC):
    """Shared machinery: fitting with restarts, and per-client evaluation."""

    #: The component family (its class attribute ``needs_y`` says whether ``y`` is required).
    _family_class = None
    #: The constructor arguments that define the family (:meth:`family_params`).
    _family_params = ()
    @abstractmethod
    def _make_family(self, backend):
        """The component family these hyper-parameters describe, computing with ``backend``'s kernels."""

    def _user_start(self, family, units, K, d):
        """``(weights, theta)`` from the user's initial values (in standard units), or None.

        Shapes are checked against ``n_components``, the ``K`` clients and ``d`` features first: a start
        with another number of components would fit that many and leave ``n_components`` (and BIC) wrong.
        """
        name, theta = self._theta_init, getattr(self, self._theta_init)
        if theta is None:
            if self.weights_init is not None:
                raise ValueError(f"weights_init needs {name}: a start fixes both.")
            return None
        R = self.n_components
        theta = _real_array(theta, name)
        if theta.shape not in ((R, d), (K, R, d)):
            raise ValueError(f"{name} must have shape (n_components, n_features) = ({R}, {d}) or (n_clients, "
                             f"n_components, n_features) = ({K}, {R}, {d}); got {theta.shape}.")
        weights = self.weights_init
        if weights is not None:
            weights = _real_array(weights, "weights_init")
            if weights.shape not in ((R,), (K, R)):
                raise ValueError(f"weights_init must have shape (n_components,) = ({R},) or (n_clients, "
                                 f"n_components) = ({K}, {R}); got {weights.shape}.")
        return weights, family.to_internal(family.design_theta(theta), units)

    @abstractmethod
    def _publish(self, params):
        """Set the family-specific fitted attributes from the internal parameters."""

    def _check_params(self):
        """Every constructor argument against its declared constraint, the method's own options included:
        the fit's method object (a copy of ``method``, or the named method with its defaults)."""
        P.validate(self.get_params(deep=False), self._parameter_constraints)
        return make_method(self.method)

    @property
    def needs_y(self):
        """Whether the model is of responses ``y`` given ``X`` (a mixture of regressions)."""
        return self._family_class.needs_y

    def family_params(self):
        """The options of the model's component family: what every party of a fit needs to compute its part
        (:mod:`fedmm.flower` sends them to the clients)."""
        return {name: getattr(self, name) for name in self._family_params + ("backend",)}

    def make_family(self, n_samples):
        """The component family of these options, computing with the kernels ``backend`` chooses for
        ``n_samples`` rows."""
        return self._make_family(resolve_backend(self.backend, n_samples))

    def fit_clients(self, clients, client_ids, n_features):
        """Fit through a transport of clients instead of data in this process: what :mod:`fedmm.flower`'s
        server calls. ``clients`` has the methods of :class:`fedmm.clients.LocalClients` (the clients' sizes,
        their sums for the units, their starts, their rounds), and ``clients.family`` is
        :meth:`make_family`'s; ``client_ids`` name the clients and ``n_features`` is their feature count."""
        strategy = self._check_params()
        if hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return self._fit_clients(strategy, clients.family, clients, client_ids, n_features)

    def _fit(self, X, y, groups):
        strategy = self._check_params()
        data = FederatedData.from_input(X, y, groups, require_y=self.needs_y)
        family = self.make_family(data.X.shape[0])
        if data.feature_names is not None:
            self.feature_names_in_ = data.feature_names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return self._fit_clients(strategy, family, LocalClients(family, data), data.client_ids, data.n_features)

    def _fit_clients(self, strategy, family, clients, client_ids, n_features):
        """The fit with the validated method object ``strategy``, talking to the clients only through
        ``clients`` (:mod:`fedmm.clients`; across separate parties :mod:`fedmm.flower`), which hold their
        data in the data's own units."""
        rng = check_random_state(self.random_state)
        if "random_state" in strategy.get_params():
            # A method that draws (D-FedEM's random graph) takes a seed from the fit's, the same for all starts.
            seed = rng.randint(2 ** 31 - 1)
            if strategy.random_state is None:
                strategy.set_params(random_state=seed)
        check_components(clients.n_samples, client_ids, self.n_components, per_client=strategy.per_client)
        self.n_features_in_ = n_features
        # Fit in the standard units the model is equivariant under, then map back (docs/units.md).
        units = family.units(clients.moments())
        clients.set_units(units)
        user = self._user_start(family, units, clients.n_clients, self.n_features_in_)
        jacobian = _log_jacobian(units, family.needs_y)  # log-likelihoods back in the data's units, per sample
        # Choices made on held-out folds draw from a copy of the random state, so that the final fit is the
        # chosen one's fit with the same random_state.
        cv_rng = copy.deepcopy(rng)

        def fit_each(train, candidates):
            """Every candidate from the same starts: the comparison is paired."""
            starts = self._starts(family, train, candidates[0], cv_rng, user)
            return [self._estimate(family, train, fit, cv_rng, user, starts)[0].params for fit in candidates]
        strategy, selection = strategy.tune(fit_each, clients, cv_rng)
        if selection is not None:
            for key in ("score", "client_scores"):  # per sample, in the data's units as every likelihood here
                selection[key] = selection[key] + jacobian
        self.penalty_selection_ = selection

        progress = Progress(self.verbose, self.verbose_interval, jacobian)
        result, alignment = self._estimate(family, clients, strategy, rng, user, progress=progress)
        params = family.to_original(result.params, units)

        self._family = family
        self.method_ = strategy
        self.n_clients_ = clients.n_clients
        self.client_ids_ = client_ids
        self.params_ = params
        self.weights_ = params.weights
        self.alignment_ = alignment
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.history_ = {**result.history, "log_likelihood": result.history["log_likelihood"] + jacobian}
        self.log_likelihood_ = result.loglik / clients.n_samples + jacobian
        self.lower_bound_ = result.loglik.sum() / clients.n_samples.sum() + jacobian
        self._set_center(family, params, strategy.center(result.diagnostics), units)
        for name, value in strategy.fitted_attributes(result, self.client_ids_, clients.n_samples).items():
            setattr(self, name, value)
        self._publish(params)
        self.singular_components_ = check_component_sizes(
            clients.n_samples[:, None] * params.weights, client_ids, family.min_component_size(params.theta.shape[-1]),
            per_client=strategy.per_client, stacklevel=5)
        self.empty_components_ = check_empty_components(clients.n_samples[:, None] * params.weights, stacklevel=5)
        if not self.converged_:
            warnings.warn(f"method={strategy.name or type(strategy).__name__!r} did not converge in "
                          f"max_iter={self.max_iter} rounds (tol={self.tol:g}); increase max_iter or tol, or try "
                          "other starts (n_init).", ConvergenceWarning, stacklevel=3)
        return self

    def _starts(self, family, data, strategy, rng, user):
        return make_starts(family, strategy, data, self.n_components, init=self.init, n_init=self.n_init,
                           max_iter=self.max_iter, tol=self.tol, alignment=self.alignment, random_state=rng, user=user)

    def _estimate(self, family, data, strategy, rng, user, starts=None, progress=None):
        """Starts (unless given), rounds and restarts on data in standard units: ``(FitResult, Alignment or None)``."""
        starts = self._starts(family, data, strategy, rng, user) if starts is None else starts
        participation = None
        fraction, dropout = getattr(strategy, "participation", 1.0), getattr(strategy, "dropout", 0.0)
        if fraction < 1.0 or dropout > 0.0:
            participation = Participation(fraction, dropout, rng.randint(2 ** 31 - 1))
        result = fit_restarts(strategy, family, data, [start for start, _ in starts], self.max_iter, self.tol,
                              progress=progress or Progress(), participation=participation)
        alignment = starts[result.start][1]
        if strategy.per_client and self.alignment is not None and data.n_clients > 1:
            # Independent clients label their components in any order; relabel the final
            # estimates so that component r means the same thing on every client.
            params, alignment = align_params(result.params, self.alignment, rng)
            result = result._replace(params=params)
        return result, alignment

    def _set_center(self, family, params, center, units):
        """The consensus parameters: the strategy's (FedGrEM's ``nu_bar``, the shared estimate of FedEM and
        the pooled methods), else the coordinate-wise median of the (aligned) client estimates. Variances of
        the centre: ``family.center_scale``, the clients' median."""
        if center is None:
            center = client_median(params.theta)
        else:
            center = family.to_original(MixtureParams(None, center[None], params.scale[:1]), units).theta[0]
        self._center = (center, family.center_scale(params.scale))

    def _personalize(self, X, y):
        """EM on the mixing proportions of new clients, components fixed at the centre (FedEM Sec. 2.2/3.2):
        one :class:`ClientMixture` per new client."""
        check_is_fitted(self, "params_")
        many = isinstance(X, (list, tuple))
        data = FederatedData.from_input(X if many else [X], y if many or y is None else [y],
                                        n_features=self.n_features_in_, model=type(self).__name__,
                                        require_y=self._family.needs_y)
        self._check_feature_names(data.feature_names)
        data = data.with_X(self._family.design(data.X))
        center, scale = self._center
        K, R = data.n_clients, self.n_components
        params = MixtureParams(np.full((K, R), 1.0 / R), np.broadcast_to(center, (K,) + center.shape),
                               np.broadcast_to(scale, (K,) + scale.shape))
        weights = fit_weights(self._family, data, params, max_iter=self.max_iter, tol=self.tol)
        clients = [ClientMixture(self, params._replace(weights=weights).take([k])) for k in range(K)]
        return clients if many else clients[0]

    def _client_params(self, client):
        """One client's parameters (K = 1): a fitted client's id, a :class:`ClientMixture` of this model, or
        None when the model has a single client."""
        check_is_fitted(self, "params_")
        if isinstance(client, ClientMixture):
            if client.model is not self:
                raise ValueError("This ClientMixture belongs to another model: use it with the model whose "
                                 "personalize() made it.")
            return client.params_
        if client is None:
            if self.n_clients_ > 1:
                raise ValueError(f"The model has {self.n_clients_} clients: say whose mixture with client=<id> "
                                 "(or a ClientMixture from personalize).")
            return self.params_
        return self.params_.take(self._client_index([self._check_client_id(client)]))

    def _sample_labels(self, params, n_samples):
        P.validate({"n_samples": n_samples}, {"n_samples": P.integer(1)})
        return self._family.sample_labels(params.weights[0], n_samples, check_random_state(self.random_state))

    # --- evaluation on (new) data of fitted clients ------------------------------------

    def _prepare(self, X, y, client, groups, require_y=True):
        """Validate data for evaluation; return it with the matching clients' parameters.

        ``unpack`` turns a per-sample result back into the caller's layout: a
        list for list input, one array (in the caller's row order) otherwise.
        """
        check_is_fitted(self, "params_")
        fitted = dict(n_features=self.n_features_in_, model=type(self).__name__)
        require_y = require_y and self._family.needs_y
        alone = client is None and groups is None and self.n_clients_ == 1 and not isinstance(X, (list, tuple))
        if client is not None or alone:  # one client's rows (the model's only client when none is named)
            if isinstance(X, (list, tuple)):
                raise ValueError("client= goes with one array X, not a list of client arrays.")
            params = self._client_params(client)
            ids = None if alone or isinstance(client, ClientMixture) else \
                np.array([client], dtype=self.client_ids_.dtype)
            data = FederatedData.from_input([X], None if y is None else [y], **fitted, require_y=require_y,
                                            client_ids=ids)
            unpack = lambda values: values  # noqa: E731
        elif isinstance(X, (list, tuple)):
            if len(X) != self.n_clients_:
                raise ValueError(f"Got {len(X)} client arrays but the model was fitted on {self.n_clients_} "
                                 "clients; pass all of them in order, or one array with client=.")
            data = FederatedData.from_input(X, y, **fitted, require_y=require_y, client_ids=self.client_ids_)
            params = self.params_
            unpack = data.split
        elif groups is None:
            raise ValueError(f"The model has {self.n_clients_} clients: pass a list with one array per client, or "
                             "one array with client=<id> (whose parameters to use) or groups=<client id of each "
                             "row>; a new client's mixture comes from personalize(X).")
        else:
            data = FederatedData.from_input(X, y, groups, **fitted, require_y=require_y)
            params = self.params_.take(self._client_index(data.client_ids))
            unpack = data.to_caller_order
        self._check_feature_names(data.feature_names)
        return data.with_X(self._family.design(data.X)), params, unpack

    def _check_client_id(self, client):
        """One client id of the kind the fitted ids are (``True`` is not client 1, nor is ``1.0``)."""
        ids = self.client_ids_.dtype
        numeric = np.issubdtype(ids, np.number)
        kinds = (str,) if not numeric else (Real, np.floating, np.integer) if np.issubdtype(ids, np.floating) \
            else (Integral, np.integer)
        if np.ndim(client) != 0 or isinstance(client, (bool, np.bool_)) or not isinstance(client, kinds):
            kind = "an integer" if numeric else "a string"
            raise ValueError(f"client must be one fitted client id ({kind}, one of "
                             f"{self.client_ids_[:10].tolist()}{'...' if self.n_clients_ > 10 else ''}); "
                             f"got {client!r}. For several clients pass groups= or a list of arrays.")
        return client

    def _check_feature_names(self, names):
        """The columns of DataFrame input must be the fitted ones, in the fitted order (as scikit-learn checks)."""
        fitted = getattr(self, "feature_names_in_", None)
        if names is None and fitted is not None:
            warnings.warn(f"X does not have valid feature names, but {type(self).__name__} was fitted with feature "
                          "names", UserWarning, stacklevel=4)
        if names is not None and fitted is not None and list(names) != list(fitted):
            raise ValueError(f"The DataFrame's columns {list(names)} are not the fitted ones {list(fitted)} in "
                             "that order; select them with X[model.feature_names_in_].")

    def _client_index(self, ids):
        ids = np.asarray(ids)
        index = np.searchsorted(self.client_ids_, ids).clip(0, self.n_clients_ - 1)
        unknown = ids[self.client_ids_[index] != ids]
        if unknown.size:
            raise ValueError(f"Unknown client id(s) {unknown[:5].tolist()}; the fitted clients are "
                             f"{self.client_ids_[:10].tolist()}{'...' if self.n_clients_ > 10 else ''}. "
                             "For an unseen client, fit its mixing proportions first.")
        return index

    def _log_resp(self, X, y, client, groups):
        data, params, unpack = self._prepare(X, y, client, groups)
        with np.errstate(over="ignore", invalid="ignore"):
            log_norm, log_resp = self._family.log_resp(data, params)
        # A component of weight 0 has log-posterior -inf (probability 0): only NaN or a non-finite density is wrong.
        bad = ~np.isfinite(log_norm) | np.isnan(log_resp).any(axis=1)
        if bad.any():
            i = np.flatnonzero(bad)[0]
            k = np.searchsorted(data.offsets, i, side="right") - 1
            where = f"row {i - data.offsets[k]} of client {data.client_ids[k].item()!r}" if data.order is None else \
                f"row {data.order[i]} of X"
            raise ValueError(f"{bad.sum()} sample(s) (first: {where}) lie so far from every component "
                             "that their densities underflow in float64 (squared distances beyond 1e308): they "
                             "are not data of this model, or in other units than the data it was fitted on.")
        return data, log_norm, log_resp, unpack

    def _score_samples(self, X, y, client, groups):
        _, log_norm, _, unpack = self._log_resp(X, y, client, groups)
        return unpack(log_norm)

    def _score(self, X, y, client, groups):
        _, log_norm, _, _ = self._log_resp(X, y, client, groups)
        return float(log_norm.mean())

    def _predict_proba(self, X, y, client, groups):
        _, _, log_resp, unpack = self._log_resp(X, y, client, groups)
        return unpack(np.exp(log_resp))

    def _information_criterion(self, X, y, client, groups, penalty, classification=False):
        """``-2 loglik + penalty(n) * n_parameters`` over the given clients (:meth:`_n_parameters`); with
        ``classification``, ICL: plus ``-2 sum_i log t_i`` for the posterior ``t_i`` of each sample's most
        probable component (mclust's ICL, Biernacki et al. 2000), the entropy of the hard classification."""
        data, log_norm, log_resp, _ = self._log_resp(X, y, client, groups)
        index = None if isinstance(client, ClientMixture) else self._client_index(data.client_ids)
        value = -2.0 * log_norm.sum() + penalty(len(log_norm)) * self._n_parameters(index)
        return value - 2.0 * log_resp.max(axis=1).sum() if classification else value

    def _n_parameters(self, index):
        """Free parameters of the fitted clients in ``index`` (None: one new client, ``personalize``).

        Mixing proportions count ``R - 1`` per client (once in all for the pooled methods). Component
        ``r``'s parameters and its variances count once per distinct value among the clients, as the
        method says (:meth:`fedmm.methods.Method.distinct_components`: once in all where components are
        shared, once per client otherwise, FedGrEM's by what its central update pooled). Variances shared
        by a client's components (a tied covariance, a shared noise variance) count as component 0's.
        A new client adds its proportions only.
        """
        strategy, R, d = self.method_, self.n_components, self.n_features_in_
        if index is None:
            return R - 1
        p = self._family.param_dim(d)
        client_scale = self._family.n_client_scale_parameters(R, d)
        component_scale = (self._family.n_parameters(R, d) - (R - 1) - client_scale) / R - p
        means, scales = strategy.distinct_components(self, index, p, self._family.scale_per_component)
        return ((1 if strategy.shared else len(index)) * (R - 1) + p * means.sum()
                + component_scale * scales.sum() + client_scale * scales[0])

    def _bic(self, X, y, client, groups):
        return self._information_criterion(X, y, client, groups, np.log)

    def _icl(self, X, y, client, groups):
        return self._information_criterion(X, y, client, groups, np.log, classification=True)

    def _aic(self, X, y, client, groups):
        return self._information_criterion(X, y, client, groups, lambda n: 2.0)


class ClientMixture:
    """The mixture of one client that was not among the fitted ones, made by ``model.personalize``.

    Its components are the model's consensus (``center_`` and the clients'
    median variances), its proportions its own (FedEM Sec. 2.2 and 3.2: a
    client unseen at training fits only its proportions, with no round with
    the others). It evaluates through the model that made it: every method
    below is the model's own with ``client=`` this object, and the object
    itself can be passed as ``client=`` to the model.

    Attributes
    ----------
    model : FederatedGaussianMixture or FederatedMixtureRegression
    params_ : MixtureParams
        The client's parameters in the data's units (leading client axis of length 1).
    weights_ : ndarray of shape (n_components,)
    """

    def __init__(self, model, params):
        self.model = model
        self.params_ = params

    @property
    def weights_(self):
        return self.params_.weights[0]

    def __repr__(self):
        return f"ClientMixture(weights_={np.round(self.weights_, 3).tolist()})"

    def predict(self, *args):
        """``model.predict(*args, client=self)``."""
        return self.model.predict(*args, client=self)

    def predict_proba(self, *args):
        """``model.predict_proba(*args, client=self)``."""
        return self.model.predict_proba(*args, client=self)

    def score_samples(self, *args):
        """``model.score_samples(*args, client=self)``."""
        return self.model.score_samples(*args, client=self)

    def score(self, *args):
        """``model.score(*args, client=self)``."""
        return self.model.score(*args, client=self)

    def sample(self, *args):
        """``model.sample(*args, client=self)``."""
        return self.model.sample(*args, client=self)


def _differs(value, default):
    """Whether an argument was changed from its default (an array or a callable always counts as changed)."""
    if value is default:
        return False
    try:
        return bool(value != default)
    except (TypeError, ValueError):  # an array compared elementwise
        return True


def _real_array(value, name):
    """A user's initial values as a finite float array, or a ``ValueError`` naming them."""
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of real numbers; got {type(value).__name__}.") from None
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinity.")
    return array


def _log_jacobian(units, conditional):
    """``log |d(standard)/d(original)|`` per sample: of ``y`` for a regression (densities of ``y`` given
    ``x``), of ``x`` for a Gaussian mixture."""
    if conditional:
        return -np.log(units.y_scale)
    return np.linalg.slogdet(units.x_map)[1]  # p(x) = p_std(z) |det x_map|


_SHARED_PARAMS_DOC = """
    method : str or method object, default="fedgrem"
        The estimation method, by name with its defaults ({METHOD_NAMES}) or as an object of
        :mod:`fedmm.methods` with options of its own, e.g. ``FedGrEM(penalty="paper")``
        (``docs/methods.md`` says which to choose): FedGrEM is robust to outlier clients and pools
        clients as far as they are alike.
    n_init : int, default=1
        Number of starts; the best log-likelihood is kept (per client for the
        local methods, whose clients are independent problems).
    max_iter : int, default=500
        Maximum number of rounds (E-step + M-step on every client). FedGrEM
        needs about 150 on the paper's design and up to several hundred on
        real data with many components; a run that stops early is worse
        than its fixed point (hence more than scikit-learn's 100).
    tol : float, default=1e-3
        Stop when no client's mean log-likelihood per sample changes by this much.
    init : {"auto", "family", "local-em", "common", "trimmed-pooled", "pooled-and-local"}, default="auto"
        How starts are made (``docs/alignment.md``, ``docs/units.md``): the
        family's start on each client (or the pooled data), local EM on every
        client then alignment (the paper's, App. B), one start broadcast to
        all clients, EM with pooled components and each client's own
        proportions, trimmed of the clients it fits worst, or both of the
        last two (the second kept
        only where the method finds it better). "auto" is the method's default
        ("pooled-and-local" for FedGrEM, "common" for FedEM, "local-em" for
        TGMM, "family" for the local and pooled methods). Ignored when
        initial values are given.
    alignment : {"consensus", "stepwise", "greedy", "exhaustive"} or None, default="consensus"
        How per-client labels are aligned (:func:`fedmm.alignment.align`):
        per-client starts of methods that pool estimates, and the final
        estimates of the local methods, so that component ``r`` is the same
        component on every client. None leaves labels as estimated.
    backend : {"auto", "numba", "numpy", "cupy"}, default="auto"
        Kernels for the E-step (``docs/performance.md``): Numba's fused
        parallel pass, the numpy reference, or CuPy on a GPU; "auto" takes
        CuPy for at least 1e6 samples when a GPU is present, Numba otherwise.
    verbose : int, default=0
        0 prints nothing; 1 one line per run (start, FedGrEM's restart passes)
        with its rounds, time and log-likelihood per sample; 2 also every
        ``verbose_interval`` rounds, with the round's records (as in
        ``history_``).
    verbose_interval : int, default=10
        Rounds between printed lines at ``verbose=2``.
    random_state : int, RandomState instance or None, default=None
        Seeds every random choice (the starts).
"""

_SHARED_PARAMS_DOC = _SHARED_PARAMS_DOC.replace("{METHOD_NAMES}", ", ".join(f'"{m}"' for m in METHODS))

_SHARED_ATTRS_DOC = """
    weights_ : ndarray of shape (n_clients, n_components)
        Mixing proportions of every client.
    n_clients_ : int
    client_ids_ : ndarray of shape (n_clients,)
        Client labels: ``0..K-1`` for list input, the sorted ``groups`` values otherwise.
    n_features_in_ : int
    n_iter_ : int
        Rounds used by the kept run(s), summed over their passes: ``max_iter``
        bounds each pass, and FedGrEM's restarts from the consensus
        (``center_restarts``) add passes, so ``n_iter_`` can exceed it.
    converged_ : bool
    singular_components_ : ndarray of shape (n_clients, n_components), bool
        Components that hold at least half a sample but fewer than their own variance needs (two for a
        diagonal variance, ``d + 1`` for a full covariance, the coefficients and one more for a
        regression): of their client for per-client methods (local EM, local gradient EM), over all
        clients for the others. The fit warns about them (``docs/units.md``).
    empty_components_ : ndarray of shape (n_components,), bool
        Components with less than half a sample over all clients: the fit is a mixture of fewer
        components, and warns (``EmptyComponentWarning``; ``docs/units.md``).
    log_likelihood_ : ndarray of shape (n_clients,)
        Mean log-likelihood per sample of every client at the fitted parameters.
    lower_bound_ : float
        Mean log-likelihood per sample over all clients.
    alignment_ : Alignment or None
        The permutations applied to align the clients' labels (``perms``, of
        shape (n_clients, n_components)), their score and method; None when
        none were applied.
    history_ : dict of ndarray of shape (n_iter_,)
        Round by round, for the start with the highest total log-likelihood:
        ``"log_likelihood"`` (mean per sample, at the round's start),
        ``"parameter_change"``, ``"messages"`` and ``"floats"`` sent in the round
        (``docs/decentralized.md``, "Communication"), and for FedGrEM ``"penalty"`` (``lambda_t``),
        ``"central_iterations"`` and ``"pooled_fraction"``.
    center_ : ndarray of shape (n_components, n_features)
        The consensus: FedGrEM's ``nu_bar``, the shared estimate of FedEM and
        the pooled methods, the median of the client estimates otherwise.
    pooled_, distance_to_center_ : ndarray of shape (n_clients, n_components)
        FedGrEM and d-FedGrEM (per neighbourhood): whether the last central update pooled each client's
        component onto the centre, and how far its local estimate was.
    pooling_threshold_ : ndarray of shape (n_clients, n_components)
        FedGrEM only: ``lambda_T / (sqrt(n_k) max(1, w_kr R))`` at the starting
        weights with ``pooling_sizes="information"`` (the default), ``lambda_T /
        sqrt(n_k)`` with ``"client"``, ``/ sqrt(n_k w_kr R)`` with
        ``"component"``: the pooling distance. With ``shrinkage="linear"``, the
        distance each client's component moved towards the centre.
    outlier_scores_ : ndarray of shape (n_clients,)
        FedGrEM only: how far each client's estimates are from the consensus,
        against the clients' own spread (:func:`fedmm.algorithms.fedgrem.outlier_scores`);
        above 1: significant at level 1%.
    suspected_outliers_ : ndarray
        FedGrEM only: ids of the clients with score above 1, most suspect first
        (an honest client is flagged about 2% of the time on the paper's design).
    restarted_clients_ : ndarray
        FedGrEM only: ids of the clients whose restart from the consensus was
        kept (``center_restarts``).
    collaborator_weights_ : ndarray of shape (n_clients, n_clients)
        FedeRiCo only: row ``i`` is client ``i``'s weights ``w_ij`` on the
        clients' models after the last round.
    collaboration_graph_ : ndarray of shape (n_clients, n_clients), bool
        Dynamic graph only: which clients pulled each other in the last round.
    penalty_selection_ : dict or None
        ``penalty="auto"`` only: the options ``"chosen"`` (a dict), the
        ``"candidates"``, their trimmed held-out log-likelihoods ``"score"``
        and every client's ``"client_scores"``
        (:func:`fedmm.algorithms.tuning.select_penalty`).
"""

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
                              "means_init": _ARRAY_OR_NONE}

    def __init__(self, n_components=1, *, method="fedgrem", covariance_type="diag", n_init=1, max_iter=500,
                 tol=1e-3, init="auto", alignment="consensus", reg_covar=1e-6, weights_init=None, means_init=None,
                 backend="auto", verbose=0, verbose_interval=10, random_state=None):
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
        self.verbose = verbose
        self.verbose_interval = verbose_interval
        self.random_state = random_state

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

    def personalize(self, X):
        """The mixture of a client unseen at training: its own proportions, components fixed at ``center_``.

        EM on the proportions only (FedEM Sec. 2.2 / 3.2): the new client
        needs no round with the others.

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
            The client id of every row when ``X`` is one array.

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
        """Mean log-likelihood per sample over all the given samples."""
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
    Likelihoods are those of ``y`` given ``x`` (as flexmix reports them);
    ``score`` is the mean log-likelihood per sample, not R^2.
    """

    _theta_init = "coef_init"
    _family_class = RegressionFamily
    _family_params = ("fit_intercept", "noise_variance", "precondition")
    _parameter_constraints = {**_SHARED_CONSTRAINTS, "fit_intercept": P.boolean,
                              "noise_variance": P.any_of(P.one_of(*NOISE_MODES),
                                                         P.real(0.0, np.inf, low_open=True, high_open=True)),
                              "precondition": P.boolean, "weights_init": _ARRAY_OR_NONE, "coef_init": _ARRAY_OR_NONE}

    def __init__(self, n_components=1, *, method="fedgrem", fit_intercept=True, noise_variance="component",
                 precondition=True, n_init=1, max_iter=500, tol=1e-3, init="auto", alignment="consensus",
                 weights_init=None, coef_init=None, backend="auto", verbose=0, verbose_interval=10, random_state=None):
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
        self.verbose = verbose
        self.verbose_interval = verbose_interval
        self.random_state = random_state

    def _check_params(self):
        strategy = super()._check_params()
        if not self.precondition and not isinstance(strategy, GradientStrategy):
            raise ValueError(f"precondition=False changes the gradient step; {type(strategy).__name__} takes "
                             "none. Leave it at its default True or choose a gradient method.")
        return strategy

    def _make_family(self, backend):
        return RegressionFamily(self.fit_intercept, self.noise_variance, precondition=self.precondition,
                                backend=backend)

    def _publish(self, params):
        d = self.n_features_in_
        self.coef_ = params.theta[..., :d]
        self.intercept_ = params.theta[..., d] if self.fit_intercept else np.zeros(params.weights.shape)
        self.noise_variance_ = params.scale[..., 0]
        center = self._center[0]
        self.center_ = center[:, :d]
        self.center_intercept_ = center[:, d] if self.fit_intercept else np.zeros(len(center))

    def personalize(self, X, y):
        """The mixture of a client unseen at training: its own proportions, components fixed at the centre.

        EM on the proportions only (FedEM Sec. 2.2 / 3.2).

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
            The client id of every row when ``X`` is one array.

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
        """Mean log-likelihood per sample of ``y`` given ``x`` (not R^2)."""
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
