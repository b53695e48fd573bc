"""What both estimators share: checking their options, fitting with restarts through a transport of
clients, evaluating fitted and new clients, counting parameters; their shared docs."""

import copy
import warnings
from abc import ABC, abstractmethod
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .. import _params as P
from ..alignment import ALIGNMENT_METHODS
from ..clients import LocalClients, fit_weights, server_side
from ..data import FederatedData, check_component_sizes, check_components, check_copies, check_empty_components
from ..engine import Progress, fit_restarts
from ..protocol import Participation
from ..families import MixtureParams
from ..initialization import INITS, align_params, make_starts, with_own_fits
from ..kernels import BACKENDS, resolve_backend
from ..methods import METHODS, Method, make_method
from ..privacy import (OutsideBoundsWarning, PrivateClients, calibrated_rounds, centre_start, clip_to_bounds,
                       epsilon_spent, noise_multiplier, outside_bounds_message, private_server, run_stages,
                       stage_rounds, update_size)
from ..robust import client_median
from ._client import ClientMixture
from ._progress import PrivateProgress
from ._registry import register_model
from ._search import check_search_input, new_client_rows, score_with_new_clients, set_method_params

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
    "warm_start": P.boolean,
    "random_state": P.random_state,
}
#: What each estimator's initial values may be before they meet the data (shapes are checked against it).
_ARRAY_OR_NONE = P.any_of(P.none, P.instance(list, tuple, np.ndarray, text="an array-like"))

__all__ = ["ClientMixture"]


class _FederatedMixture(BaseEstimator, ABC):
    """Shared machinery: fitting with restarts, and per-client evaluation."""

    # scikit-learn's metadata routing (on with ``sklearn.set_config(enable_metadata_routing=True)``): each row's
    # client id goes to these methods whenever a search or cross-validation is given ``groups`` (docs/selection.md).
    __metadata_request__fit = {"groups": True}
    __metadata_request__score = {"groups": True}
    __metadata_request__predict = {"groups": True}
    __metadata_request__predict_proba = {"groups": True}

    #: The model's name, by which :data:`fedmm.estimators.MODELS` holds the class (and Flower's clients build it);
    #: a subclass that sets one is registered when it is defined.
    model = None
    #: How the studies simulate the model (:class:`fedmm.estimators.Simulation`); None: no study runs it.
    simulation = None
    #: The component family (its class attribute ``needs_y`` says whether ``y`` is required).
    _family_class = None
    #: The constructor arguments that define the family (:meth:`family_params`).
    _family_params = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "model" in cls.__dict__ and cls.model is not None:
            register_model(cls)

    @abstractmethod
    def _make_family(self, backend):
        """The component family these hyper-parameters describe, computing with ``backend``'s kernels."""

    def _user_start(self, family, units, K, d):
        """``(weights, theta)`` from the user's initial values (in standard units), the last fit's parameters
        (standard units) for a warm start, or None.

        Shapes are checked against ``n_components``, the ``K`` clients and ``d`` features first: a start
        with another number of components would fit that many and leave ``n_components`` (and BIC) wrong.
        """
        if self.warm_start and hasattr(self, "params_"):
            previous = self.params_
            if previous.weights.shape != (K, self.n_components) or previous.theta.shape[-1] != family.param_dim(d):
                raise ValueError(f"warm_start=True refits the last fit's {previous.weights.shape[0]} clients, "
                                 f"{previous.weights.shape[1]} components and its features; got {K} clients, "
                                 f"n_components={self.n_components}, {d} features. Set warm_start=False for "
                                 "another federation.")
            return family.params_to_internal(previous, units)
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

    def moment_shapes(self, n_features):
        """The shapes of a client's sums for the units (:meth:`fedmm.families.Family.moment_shapes`)."""
        return self._family_class.moment_shapes(n_features)

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

    def set_params(self, **params):
        """Set the estimator's parameters (scikit-learn's), and a method's own options as ``method__<option>``,
        also where ``method`` is a name: it then becomes that method's object with its defaults and the option."""
        return super().set_params(**set_method_params(self, params))

    def _fit(self, X, y, groups):
        check_search_input(self, X, groups)
        strategy = self._check_params()
        data = FederatedData.from_input(X, y, groups, require_y=self.needs_y)
        if getattr(self, "privacy", None) is not None:
            data = self._clip_to_bounds(data)
        family = self.make_family(data.X.shape[0])
        if data.feature_names is not None:
            self.feature_names_in_ = data.feature_names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        copied = data.client_ids[check_copies(data, stacklevel=4)]
        clients, client_ids, n_features = server_side(LocalClients(family, data)), data.client_ids, data.n_features
        del data  # the clients hold the rows and move them into standard units: the fit keeps one copy, not two
        self._fit_clients(strategy, family, clients, client_ids, n_features)
        return self.name_suspects(strategy, copied)

    def _clip_to_bounds(self, data):
        """Every client's rows clipped into the private fit's public ``bounds``, as each client does on its own
        rows across parties (:mod:`fedmm.flower`), with a warning naming the clients that held rows outside
        (:class:`fedmm.privacy.OutsideBoundsWarning`): a local check, nothing released."""
        X, outside = clip_to_bounds(data.X, *self.privacy.validate().box(data.n_features))
        if not outside.any():
            return data
        counts = np.bincount(np.repeat(np.arange(data.n_clients), data.n_samples), weights=outside,
                             minlength=data.n_clients).astype(int)
        which = np.flatnonzero(counts)
        warnings.warn(outside_bounds_message(counts[which], data.n_samples[which],
                                             [data.client_ids[k].item() for k in which]),
                      OutsideBoundsWarning, stacklevel=4)
        return data.with_X(X)

    def name_suspects(self, strategy, ids):
        """Put the clients ``ids``, caught by other means than the outlier statistic (rows that copy another
        client's, replies relabelled by their party: ``docs/threat-model.md``), first in a robust method's
        ``suspected_outliers_``: they are certain. Returns the estimator."""
        if len(ids) and strategy.robust and hasattr(self, "suspected_outliers_"):
            rest = self.suspected_outliers_[~np.isin(self.suspected_outliers_, ids)]
            self.suspected_outliers_ = np.concatenate([np.asarray(ids), rest])
        return self

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
        strategy.check_clients(clients.n_clients)
        self.n_features_in_ = n_features
        privacy = getattr(self, "privacy", None)
        if privacy is not None:
            return self._fit_private(strategy, family, clients, client_ids, privacy.validate(), rng)
        # Fit in the standard units the model is equivariant under, then map back (docs/units.md).
        moments = clients.moments()
        units = family.units(moments)
        clients.set_units(units)
        moments = units.map_moments(moments)   # in the fit's units (init="screened")
        user = self._user_start(family, units, clients.n_clients, self.n_features_in_)
        jacobian = _log_jacobian(units, family.needs_y)  # log-likelihoods back in the data's units, per sample
        # Choices made on held-out folds draw from a copy of the random state, so that the final fit is the
        # chosen one's fit with the same random_state.
        cv_rng = copy.deepcopy(rng)

        def fit_each(train, candidates):
            """Every candidate from the same starts: the comparison is paired."""
            starts = self._starts(family, train, candidates[0], cv_rng, user, moments)
            return [self._estimate(family, train, fit, cv_rng, user, starts)[0].params for fit in candidates]
        strategy, selection = strategy.tune(fit_each, clients, cv_rng)
        if selection is not None:
            for key in ("score", "client_scores"):  # per sample, in the data's units as every likelihood here
                selection[key] = selection[key] + jacobian
        self.penalty_selection_ = selection

        progress = Progress(self.verbose, offset=jacobian)
        result, alignment = self._estimate(family, clients, strategy, rng, user, progress=progress, moments=moments)
        used = strategy.used_models(result.diagnostics)
        if used is not None:  # each client reports the model it relies on (FedeRiCo), and its likelihood under it,
            reported = result.params.take(used)   # with its own proportions at that model's components: a model's
            reported = reported._replace(weights=clients.fit_weights(reported))   # are those of all who use it
            result = result._replace(params=reported, loglik=clients.loglik(reported))
        return self._set_fitted(strategy, family, clients, client_ids, result, alignment, units, jacobian)

    def _fit_private(self, strategy, family, clients, client_ids, privacy, rng):
        """The differentially private fit (:mod:`fedmm.privacy`): public units and start, then exactly
        ``privacy``'s rounds (:func:`fedmm.privacy.calibrated_rounds`) whose aggregate is clipped and noised;
        nothing else is asked of the clients."""
        if not family.private_form:
            raise ValueError(f"privacy= needs a family with a private form (fedmm.families.Family.private_form: "
                             f"whitened sums, the box of its parameters); {type(family).__name__} declares none.")
        form, tied = strategy.private(privacy.unit), getattr(family, "covariance_type", None) == "tied"
        if form is None or tied:
            methods = sorted(name for name, cls in METHODS.items() if cls().private(privacy.unit) is not None)
            raise ValueError(f"privacy= with unit={privacy.unit!r} runs method={' or '.join(map(repr, methods))} (or "
                             "a method whose private() declares it) with covariance_type 'diag', 'spherical', "
                             f"'full' or 'identity' for now; got method={strategy.name or type(strategy).__name__!r}"
                             + (", covariance_type='tied'." if tied else "."))
        fixed = set(strategy.get_params()) - {"participation", "dropout"}
        changed = sorted(k for k in fixed if repr(strategy.get_params()[k]) != repr(type(strategy)().get_params()[k]))
        if changed:
            raise ValueError(f"Under privacy the options {changed} of method={strategy.name!r} do not apply (its "
                             "centre is the clipped updates', its penalty the clip, and its clients take their "
                             "M-step: docs/privacy.md); leave them at their defaults.")
        strategy.set_params(**form.options)   # what the method's private form sets (FedGrEM's eta_rule)
        if (self.n_init != 1 or self.init != "auto" or self.warm_start
                or privacy.rounds != "auto" and privacy.rounds < self.n_components):
            raise ValueError("A private fit runs once from a public start (one component split into more, or "
                             "means_init), a stage of rounds per component: use n_init=1, init='auto', "
                             "warm_start=False and DifferentialPrivacy(rounds=...) >= n_components.")
        d, K, R = self.n_features_in_, clients.n_clients, self.n_components
        n_rounds = calibrated_rounds(privacy, clients.n_samples, R, update_size(family, d, R))
        sigma = noise_multiplier(privacy.epsilon, privacy.delta, n_rounds)
        moments = privacy.moments(d)
        units = family.units(moments)
        box = np.sort(family.to_internal(np.stack(privacy.box(d)), units), axis=0)   # the bounds in the fit's units
        average = private_server(strategy, privacy, family, d, sigma, rng, box)
        # Clients across parties give their own private transport (on Flower: secure aggregation).
        private = getattr(clients, "private", lambda average: PrivateClients(clients, average))(average)
        private.set_units(units)
        user = self._user_start(family, units, K, d)
        centre = family.to_internal(moments.mean[None], units)[0]   # 0 unless the model fixes the units
        participation = None
        fraction, dropout = getattr(strategy, "participation", 1.0), getattr(strategy, "dropout", 0.0)
        if fraction < 1.0 or dropout > 0.0:
            participation = Participation(fraction, dropout, rng.randint(2 ** 31 - 1))
        if user is None:   # one component at the centre, split into more at public rounds
            start, stages = centre_start(family, K, centre), stage_rounds(n_rounds, R)
        else:
            weights, theta = user
            start = centre_start(family, K, centre)
            start = MixtureParams(np.full((K, R), 1.0 / R) if weights is None else np.broadcast_to(weights, (K, R)),
                                  np.broadcast_to(theta, (K, R, d)).copy(),
                                  np.repeat(start.scale, R, axis=1))
            stages = [n_rounds]
        progress = PrivateProgress(self.verbose)
        result = run_stages(average, family, private, start, stages, rng, progress, participation)
        self.penalty_selection_ = None
        self.noise_multiplier_ = sigma
        self.releases_ = [family.to_original(release, units) for release in average.release_history()]
        self.privacy_spent_ = (float(epsilon_spent(sigma, average.releases, privacy.delta)), float(privacy.delta))
        progress.summary(result.n_iter, self.privacy_spent_, (privacy.epsilon, privacy.delta))
        return self._set_fitted(strategy, family, clients, client_ids, result, None, units, None, server=average)

    def _set_fitted(self, strategy, family, clients, client_ids, result, alignment, units, jacobian, server=None):
        """The fitted attributes of ``result`` (standard units) in the data's units; ``jacobian`` None for a
        private fit, whose log-likelihoods were not released (no ``log_likelihood_``, ``lower_bound_`` or
        ``history_["log_likelihood"]``), and whose ``server`` (the server's side that ran,
        :class:`fedmm.privacy.PrivateAverage`) gives the centre and what else the server fitted."""
        server = strategy if server is None else server
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
        self.communication_ = clients.ledger.summary()
        if jacobian is None:   # a private fit: its clients' log-likelihoods were not released, so none are reported
            self.history_ = {k: v for k, v in result.history.items() if k != "log_likelihood"}
            for name in ("log_likelihood_", "lower_bound_"):
                self.__dict__.pop(name, None)
        else:
            self.history_ = {**result.history, "log_likelihood": result.history["log_likelihood"] + jacobian}
            self.log_likelihood_ = result.loglik / clients.n_samples + jacobian
            self.lower_bound_ = result.loglik.sum() / clients.n_samples.sum() + jacobian
        self._set_centers(family, params, server.groups(result.diagnostics), units)
        for name, value in server.fitted_attributes(result, self.client_ids_, clients.n_samples).items():
            setattr(self, name, value)
        self._publish(params)
        self.singular_components_ = check_component_sizes(
            clients.n_samples[:, None] * params.weights, client_ids, family.min_component_size(params.theta.shape[-1]),
            per_client=strategy.per_client, stacklevel=5)
        self.empty_components_ = check_empty_components(clients.n_samples[:, None] * params.weights, stacklevel=5)
        if not self.converged_ and jacobian is not None:  # a private fit has no stopping rule to meet
            warnings.warn(f"method={strategy.name or type(strategy).__name__!r} did not converge in "
                          f"max_iter={self.max_iter} rounds (tol={self.tol:g}); increase max_iter or tol, or try "
                          "other starts (n_init).", ConvergenceWarning, stacklevel=3)
        return self

    def _starts(self, family, data, strategy, rng, user, moments=None):
        return make_starts(family, strategy, data, self.n_components, init=self.init, n_init=self.n_init,
                           max_iter=self.max_iter, tol=self.tol, alignment=self.alignment, random_state=rng, user=user,
                           moments=moments)

    def _estimate(self, family, data, strategy, rng, user, starts=None, progress=None, moments=None):
        """Starts (unless given; ``moments``, the pooled ones in standard units, for ``init="screened"``), rounds
        restarts and own fits on data in standard units: ``(FitResult, Alignment or None)``."""
        starts = self._starts(family, data, strategy, rng, user, moments) if starts is None else starts
        participation = None
        fraction, dropout = getattr(strategy, "participation", 1.0), getattr(strategy, "dropout", 0.0)
        if fraction < 1.0 or dropout > 0.0:
            participation = Participation(fraction, dropout, rng.randint(2 ** 31 - 1))
        result = fit_restarts(strategy, family, data, [start.params for start in starts], self.max_iter, self.tol,
                              progress=progress or Progress(), participation=participation)
        result = with_own_fits(strategy, data, result, starts[-1], family.n_parameters(self.n_components,
                                                                                    self.n_features_in_))
        alignment = starts[result.start].alignment
        if strategy.per_client and self.alignment is not None and data.n_clients > 1:
            # Independent clients label their components in any order; relabel the final
            # estimates so that component r means the same thing on every client.
            params, alignment = align_params(result.params, self.alignment, rng)
            result = result._replace(params=params)
        return result, alignment

    def _set_centers(self, family, params, groups, units):
        """The consensus parameters of every group of clients (:meth:`fedmm.methods.Method.groups`), the
        largest first: the strategy's (FedGrEM's ``nu_bar``, the shared estimate of FedEM and the pooled
        methods), else the coordinate-wise median of the (aligned) client estimates. Variances of each
        centre: ``family.center_scale``, its group's clients' median."""
        if groups is None:
            self._centers = [(client_median(params.theta), family.center_scale(params.scale))]
        else:
            centers, labels = groups
            labels = np.zeros(len(params.theta), dtype=int) if labels is None else labels
            original = family.to_original(MixtureParams(None, centers, params.scale[:len(centers)]), units).theta
            self._centers = [(center, family.center_scale(params.scale[labels == g]))
                             for g, center in enumerate(original)]
        self._center = self._centers[0]

    def _personalize(self, X, y):
        """New clients' mixtures, one :class:`ClientMixture` each: EM on their proportions with the components at the
        centre of the group that fits them best (FedEM Sec. 2.2/3.2), then the components as the method fits them
        for one more client (:meth:`fedmm.algorithms.Strategy.new_client`)."""
        check_is_fitted(self, "params_")
        many = isinstance(X, (list, tuple))
        data = FederatedData.from_input(X if many else [X], y if many or y is None else [y],
                                        n_features=self.n_features_in_, model=type(self).__name__,
                                        require_y=self._family.needs_y)
        self._check_feature_names(data.feature_names)
        data = data.with_X(self._family.design(data.X))
        K, R = data.n_clients, self.n_components
        best, best_loglik = None, np.full(K, -np.inf)
        # Where the clients formed groups, a new client joins the group whose centre fits its data best.
        for center, scale in self._centers:
            params = MixtureParams(np.full((K, R), 1.0 / R), np.broadcast_to(center, (K,) + center.shape),
                                   np.broadcast_to(scale, (K,) + scale.shape))
            params = params._replace(weights=fit_weights(self._family, data, params, max_iter=self.max_iter,
                                                         tol=self.tol))
            loglik = self._family.loglik(data, params)
            if best is None:
                best = params
            better = loglik > best_loglik
            best = MixtureParams(*(np.where(better.reshape((K,) + (1,) * (a.ndim - 1)), a, b)
                                   for a, b in zip(params, best)))
            best_loglik = np.maximum(loglik, best_loglik)
        # Its components as the method would fit them for one more client (FedGrEM: shrunk towards that centre).
        best = self.method_.new_client(self._family, data, best, getattr(self, "history_", {}), self.max_iter, self.tol)
        clients = [ClientMixture(self, best.take([k])) for k in range(K)]
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
        new = new_client_rows(self, X, client, groups)
        if new is not None:   # held-out clients (GroupKFold): scored as new clients
            return score_with_new_clients(self, X, y, groups, new)
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
    return units.log_abs_det  # p(x) = p_std(z) |det x_map|
