"""Differential privacy: what a fit may reveal about one client's rows, as a number (``docs/privacy.md``).

``privacy=DifferentialPrivacy(epsilon, delta, bounds=...)`` on an estimator makes its fit
``(epsilon, delta)``-differentially private at the level of clients: two federations are neighbours when
one client's rows differ, all of them (the unit of federated learning's DP, McMahan et al., ICLR 2018).
What the shared model, and so every other client and whoever reads the fit, learns about one client is
then bounded whatever that client's rows are.

The mechanism is DP-FedAvg's, applied to FedEM's rounds (noise on the aggregate: a trusted server, or
one that sees only the sum under secure aggregation):

- **units**: public, from ``bounds`` (the features' range, as diffprivlib asks for it); no client's rows
  are read for them, and the fit runs in them, so a change of the data's units with ``bounds`` changed
  alike leaves the fit the same, mapped back;
- **start**: public, one component at the bounds' centre with the box's variances, split into more at public
  rounds (:func:`split_component`), or the user's own means;
- **each round**: client ``k`` sends its update from the public point it was sent, one vector of its
  proportions less ``1 / R``, its means' displacement in the sent components' own units (Mahalanobis) and
  its log-variances' (:meth:`~fedmm.families.Family.log_scale`), clipped to Euclidean norm ``clip``; the
  server averages them with weights ``s_k = n_k / n`` (sizes public and capped at the median one: the
  noise grows with the largest share; the denominator ``n`` fixed) and adds Gaussian
  noise of standard deviation ``sigma * clip * max_k s_k``, the average's sensitivity to one client added
  or removed;
- **the model** is the mean of the last stage's released rounds after its first quarter, by which EM has
  settled (Polyak-Ruppert averaging); each split grows from the mean of its stage's second half
  (post-processing: nothing spent);
- **sizes** ``n_k`` are public (the server weighs clients by them); **log-likelihoods** are not released,
  so there is no stopping rule: a private fit runs exactly ``rounds`` rounds, the number its noise was
  calibrated for;
- each client's **mixing proportions** are computed from its own rows and go back to it only: what it
  alone uses (joint differential privacy, Kearns et al. 2014). The guarantee covers the shared components.

``sigma`` is calibrated before the first round so that the ``rounds`` compose to ``(epsilon,
delta)`` under Rényi DP (Mironov 2017), by Google's ``dp-accounting`` (the ``privacy`` extra); the fitted
estimator's ``privacy_spent_`` is what its rounds spent by the same accountant.
"""

import numpy as np
from sklearn.base import BaseEstimator

from . import _params as P
from .families import MixtureParams
from .protocol import take
from .units import Moments

__all__ = ["DifferentialPrivacy", "PrivateClients", "PrivateAverage", "noise_multiplier", "epsilon_spent",
           "clip_rows", "centre_start", "stage_rounds", "split_component"]

#: Where the noise is added: on the aggregate (noise on each client's own message is not built).
NOISE = ("central",)


def _accounting():
    try:
        import dp_accounting
    except ImportError as error:
        raise ImportError("Differential privacy's accounting needs Google's dp-accounting: pip install "
                          "'fedmm[privacy]'.") from error
    return dp_accounting


def _rounds_event(sigma, rounds):
    dp = _accounting()
    return dp.SelfComposedDpEvent(dp.GaussianDpEvent(sigma), rounds)


def epsilon_spent(sigma, rounds, delta):
    """The ``epsilon`` at ``delta`` of ``rounds`` Gaussian releases, each with noise ``sigma`` times its
    sensitivity, composed under Rényi DP (``dp_accounting.rdp.RdpAccountant``)."""
    accountant = _accounting().rdp.RdpAccountant()
    accountant.compose(_rounds_event(sigma, rounds))
    return accountant.get_epsilon(delta)


def noise_multiplier(epsilon, delta, rounds):
    """The smallest ``sigma`` (noise standard deviation over sensitivity) whose ``rounds`` Gaussian releases
    compose to at most ``(epsilon, delta)`` (:func:`epsilon_spent`), by ``dp_accounting``'s calibration."""
    dp = _accounting()
    return dp.calibrate_dp_mechanism(dp.rdp.RdpAccountant, lambda s: _rounds_event(s, rounds), epsilon, delta,
                                     dp.LowerEndpointAndGuess(1e-3, 1.0))


def clip_rows(v, clip):
    """Every row of ``v`` (K, m) scaled into the Euclidean ball of radius ``clip`` (rows inside stay as they are)."""
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v * np.minimum(1.0, clip / np.maximum(norms, np.finfo(float).tiny))


def centre_start(family, n_clients, centre):
    """One component at the centre of the bounds, ``centre`` (d,) in the units the fit runs in (0 in standard
    units), with the variances of the uniform distribution on the box (1/3 of the unit ones in standard
    units; the model's own where they are fixed): the public start the splitting schedule grows from
    (:func:`split_component`)."""
    d = len(centre)
    scale = family.unit_scale(d) / (3.0 if family.estimates_scale else 1.0)
    return MixtureParams(np.ones((n_clients, 1)), np.broadcast_to(centre, (n_clients, 1, d)).copy(),
                         np.broadcast_to(scale, (n_clients, 1, scale.size)).copy())


def stage_rounds(rounds, n_components):
    """The rounds of each stage of the splitting schedule (1, 2, ..., ``n_components`` components): the last
    stage takes half of ``rounds`` (all but its first quarter is averaged into the model,
    :meth:`PrivateAverage.averaged`), the others share the rest evenly, a round each at least."""
    if n_components == 1:
        return [rounds]
    base = max((rounds // 2) // (n_components - 1), 1)
    stages = [base] * (n_components - 1)
    return stages + [max(rounds - sum(stages), 1)]


def split_component(family, params, mean_weights, n_features, random_state):
    """One more component (LBG's splitting, Linde, Buzo & Gray 1980; pfl's GMM grows so too): the
    component with the largest share of the spread, ``w_r tr(Sigma_r)`` from the released average
    proportions ``mean_weights`` (R,) and the shared variances, is replaced by two, its mean moved by half a
    standard deviation either way along its widest axis; each client's proportion of it is halved between
    them. Post-processing of released numbers: no privacy spent."""
    K, R, d = params.theta.shape
    variances = family.coordinate_variances(params.scale)[0]            # (R, s')
    if family.covariance_type in ("full", "tied"):
        covariance = params.scale[0].reshape(R, d, d)
        spread = np.trace(covariance, axis1=1, axis2=2)
    else:
        spread = variances.sum(axis=1) * (d if variances.shape[1] == 1 else 1)
    r = int(np.argmax(mean_weights * spread))
    if family.covariance_type in ("full", "tied"):
        values, vectors = np.linalg.eigh(covariance[r])
        axis, sd = vectors[:, -1], np.sqrt(values[-1])
    elif variances.shape[1] == d:                                       # diagonal
        j = int(np.argmax(variances[r]))
        axis, sd = np.eye(d)[j], np.sqrt(variances[r, j])
    else:                                                               # one variance: every axis alike
        axis = random_state.standard_normal(d)
        axis, sd = axis / np.linalg.norm(axis), np.sqrt(variances[r, 0])
    step = 0.5 * sd * axis
    theta = np.concatenate([params.theta, params.theta[:, r:r + 1] + step], axis=1)
    theta[:, r] -= step
    weights = np.concatenate([params.weights, params.weights[:, r:r + 1] / 2], axis=1)
    weights[:, r] /= 2
    scale = np.concatenate([params.scale, params.scale[:, r:r + 1]], axis=1)
    return MixtureParams(weights, theta, scale)


class DifferentialPrivacy(BaseEstimator):
    """Client-level ``(epsilon, delta)``-differential privacy for a fit (see the module docstring).

    Parameters
    ----------
    epsilon : float, default=4.0
        The privacy budget of the whole fit, > 0.
    delta : float, default=1e-6
        In (0, 1); take it well below ``1 / n_clients``.
    bounds : tuple (lower, upper)
        The features' public range: numbers or arrays of shape (n_features,), ``lower < upper``. It sets
        the units the fit runs in (the box becomes ``[-1, 1]^d``) and the start; rows outside it are used as
        they are (the guarantee does not depend on them).
    clip : float, default=1.0
        The largest norm of one client's update in one round, in the components' own units: proportions,
        mean displacements over the components' spread (:meth:`~fedmm.families.GaussianFamily.whiten`) and
        log-variances together, where a coordinate estimated from ``N`` rows moves by about
        ``1 / sqrt(N)``. Updates beyond it are shrunk onto it: too small and the rounds cannot carry the
        components where they belong, too large and the noise grows with it.
    rounds : int, default=40
        The rounds the fit runs, all of them (the log-likelihoods a stopping rule would read are not
        released), and the budget is shared between: ``sigma`` grows about as ``sqrt(rounds)``. At least
        ``n_components`` (a stage each); the estimator's ``max_iter`` does not apply.
    noise : {"central"}, default="central"
        Where the noise goes: on the aggregate (a trusted server, or secure aggregation).

    Attributes set on the fitted estimator
    --------------------------------------
    privacy_spent_ : tuple (epsilon, delta)
    noise_multiplier_ : float
        ``sigma``: the noise's standard deviation over the aggregate's sensitivity.
    """

    _parameter_constraints = {
        "epsilon": P.real(0.0, np.inf, low_open=True, high_open=True),
        "delta": P.real(0.0, 1.0, low_open=True, high_open=True),
        "bounds": P.instance(tuple, list, text="a pair (lower, upper)"),
        "clip": P.real(0.0, np.inf, low_open=True, high_open=True),
        "rounds": P.integer(1),
        "noise": P.one_of(*NOISE),
    }

    def __init__(self, epsilon=4.0, delta=1e-6, bounds=None, clip=1.0, rounds=40, noise="central"):
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.clip = clip
        self.rounds = rounds
        self.noise = noise

    def validate(self):
        if self.bounds is None:
            raise ValueError("DifferentialPrivacy needs bounds=(lower, upper), the features' public range: the "
                             "units a private fit runs in cannot come from the clients' rows.")
        P.validate(self.get_params(deep=False), self._parameter_constraints)
        return self

    def moments(self, n_features):
        """The public :class:`fedmm.units.Moments` the units come from: those of the uniform distribution on
        the box, scaled so that the box's half-widths are the standard deviations (the box maps to
        ``[-1, 1]^d``)."""
        if len(self.bounds) != 2:
            raise ValueError(f"bounds must be a pair (lower, upper); got {len(self.bounds)} items.")
        lower, upper = (np.broadcast_to(np.asarray(b, dtype=float), (n_features,)) if np.ndim(b) <= 1 and
                        np.size(b) in (1, n_features) else None for b in self.bounds)
        if lower is None or upper is None:
            raise ValueError(f"bounds must be numbers or arrays of shape (n_features,) = ({n_features},).")
        if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) and np.all(lower < upper)):
            raise ValueError("bounds must be finite with lower < upper in every feature.")
        centre, half = (lower + upper) / 2.0, (upper - lower) / 2.0
        return Moments(centre, np.outer(centre, centre) + np.diag(half ** 2), None, None)


class PrivateAverage:
    """The server's round under central noise: the clients' clipped updates, averaged, plus Gaussian noise.

    Stands for a strategy whose server averages the clients' shared components (FedEM, with shares
    ``s_k = n_k / n`` of the sizes capped at the median one),
    and is that strategy in every other respect (see the module docstring for the update it releases).
    Variances move as log-variances (:meth:`~fedmm.families.Family.log_scale`), so noise leaves them
    positive.
    """

    def __init__(self, strategy, family, n_features, clip, sigma, random_state):
        self._strategy, self.family, self.d = strategy, family, n_features
        self.clip, self.sigma, self.random_state = clip, sigma, random_state
        self.released = []  # every round's release: (mean proportions, theta, log-variances)

    @property
    def releases(self):
        """How many noisy aggregates were released: the rounds privacy was spent on."""
        return len(self.released)

    def __getattr__(self, name):
        return getattr(self._strategy, name)

    def server_step(self, messages, state, t):
        broadcast, state = self._strategy.server_step(messages, state, t)   # the strategy's own bookkeeping
        sent = take(self._sent, 0)   # the components every client was sent (its proportions are its own)
        # Shares from sizes capped at the median one: the noise every client's update drowns in grows with the
        # largest share, so no one client's size (a claim like any, and a large client's a fact) may set it.
        sizes = np.minimum(messages.n, np.median(messages.n))
        share = sizes / sizes.sum()
        update = clip_rows(self._update(messages, sent), self.clip)
        noise = self.sigma * self.clip * share.max()
        mean = share @ update + noise * self.random_state.standard_normal(update.shape[1])
        weights, theta, log_scale = self._apply(mean, sent)
        self.released.append((weights, theta, log_scale))
        scale = self._scale(log_scale, sent)
        K = messages.n.size
        params = broadcast.params._replace(theta=np.broadcast_to(theta, (K,) + theta.shape).copy(),
                                           scale=np.broadcast_to(scale, (K,) + scale.shape).copy())
        return broadcast._replace(params=params), state._replace(center=theta)

    def _update(self, messages, sent):
        """(K, m): every client's update from the public point ``sent`` as one vector: its proportions less
        ``1 / R``, its means' displacement in the sent components' own units (:meth:`~fedmm.families.
        GaussianFamily.whiten`), its log-variances' (:meth:`~fedmm.families.Family.log_scale`). In these
        units every coordinate estimated from ``N`` samples has sd about ``1 / sqrt(N)``, so one ``clip``
        suits them all."""
        K, R = messages.weights.shape
        parts = [messages.weights - 1.0 / R,
                 self.family.whiten(messages.theta - sent.theta, sent.scale).reshape(K, -1)]
        if self.family.estimates_scale:
            parts.append((self.family.log_scale(messages.scale, self.d)
                          - self.family.log_scale(sent.scale, self.d)).reshape(K, -1))
        return np.concatenate(parts, axis=1)

    def _apply(self, mean, sent):
        """``(mean proportions, theta, log-variances)``: ``sent`` moved by the released update ``mean``."""
        R, d = sent.theta.shape[1:]
        theta = sent.theta[0] + self.family.unwhiten(mean[R:R + R * d].reshape(R, d), sent.scale[0])
        log_scale = self.family.log_scale(sent.scale[0], self.d)
        if self.family.estimates_scale:
            log_scale = log_scale + mean[R + R * d:].reshape(log_scale.shape)
        return 1.0 / R + mean[:R], theta, log_scale

    def _scale(self, log_scale, sent):
        return self.family.exp_scale(log_scale, self.d) if self.family.estimates_scale else sent.scale[0]

    def averaged(self, rounds):
        """``(mean proportions, theta, scale)``: the mean of the last ``rounds`` releases (Polyak-Ruppert
        averaging: once the rounds hover about the fixed point, their mean has ``rounds`` times less noise
        variance), variances averaged as log-variances."""
        weights, theta, log_scale = (np.mean(part, axis=0) for part in zip(*self.released[-rounds:]))
        return weights, theta, self._scale(log_scale, take(self._sent, 0))


class PrivateClients:
    """A transport of clients (:mod:`fedmm.clients`) that releases nothing but the private rounds.

    Rounds go through (the server's :class:`PrivateAverage` adds the noise), with the clients' log-likelihoods
    withheld (zeros: the server never reads them). Every other query a fit could make reads the clients' rows
    outside the rounds the noise was calibrated for, so it fails with what to change instead.
    """

    def __init__(self, clients, average):
        self._clients, self._average = clients, average

    n_clients = property(lambda self: self._clients.n_clients)
    n_samples = property(lambda self: self._clients.n_samples)
    ledger = property(lambda self: self._clients.ledger)
    family = property(lambda self: self._clients.family)

    @property
    def data_scale(self):
        """The divergence check's unit, public: the standard units' box (the data's own maximum would be a
        release)."""
        return 1.0

    def set_units(self, units):
        self._clients.set_units(units, scale_reply=False)

    def start(self, strategy, params):
        self._clients.start(strategy, params)
        self._average._sent = params

    def step(self, strategy, broadcast, heard=None):
        messages, replied = self._clients.step(strategy, broadcast, heard)
        self._average._sent = broadcast.params
        return messages._replace(loglik=np.zeros_like(messages.loglik)), replied

    def loglik(self, params):
        return np.zeros(self.n_clients)

    def __getattr__(self, name):
        raise ValueError(f"A private fit does not ask its clients for {name!r}: it would read their rows outside "
                         "the rounds the noise was calibrated for. Under privacy use the default start (the "
                         "public splitting start, or your own means_init), n_init=1, and options the data do not "
                         "choose.")
