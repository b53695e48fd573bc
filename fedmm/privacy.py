"""Differential privacy: what a fit may reveal about one client's rows, as a number (``docs/privacy.md``).

``privacy=DifferentialPrivacy(epsilon, delta, bounds=...)`` on an estimator makes its fit
``(epsilon, delta)``-differentially private at the level of clients: two federations are neighbours when
one client's rows differ, all of them (the unit of federated learning's DP, McMahan et al., ICLR 2018).
What the shared model, and so every other client and whoever reads the fit, learns about one client is
then bounded whatever that client's rows are.

The mechanism is DP-FedAvg's, applied to FedEM's rounds (noise on the aggregate: a trusted server, or
one that sees only the sum under secure aggregation):

- **units**: public, from ``bounds`` (the features' range, as diffprivlib asks for it); no client's rows
  are read for them, and ``clip`` is in these units, so a change of the data's units changes ``bounds``
  and leaves the fit the same, mapped back;
- **start**: public, component means drawn from ``random_state`` inside the bounds, unit variances and
  equal proportions (or the user's own start);
- **each round**: client ``k`` sends its update to the shared components it was sent, the means and the
  log-variances (:meth:`~fedmm.families.Family.log_scale`) minus the broadcast's, clipped to Euclidean norm
  ``clip``; the server averages them with weights ``s_k = n_k / n`` and adds Gaussian noise of standard
  deviation ``sigma * 2 clip max_k s_k``, the average's sensitivity to one client's rows (its clipped update
  moves within a ball of radius ``clip``, so by at most ``2 clip``, and counts by ``s_k``);
- **sizes** ``n_k`` are public (the server weighs clients by them); **log-likelihoods** are not released,
  so there is no stopping rule: a private fit runs exactly ``max_iter`` rounds, the number its noise was
  calibrated for;
- each client's **mixing proportions** are computed from its own rows and go back to it only: what it
  alone uses (joint differential privacy, Kearns et al. 2014). The guarantee covers the shared components.

``sigma`` is calibrated before the first round so that the ``max_iter`` rounds compose to ``(epsilon,
delta)`` under Rényi DP (Mironov 2017), by Google's ``dp-accounting`` (the ``privacy`` extra); the fitted
estimator's ``privacy_spent_`` is what its rounds spent by the same accountant.
"""

from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator

from . import _params as P
from .families import MixtureParams
from .protocol import ClientMessage, take
from .units import Moments

__all__ = ["DifferentialPrivacy", "PrivateClients", "PrivateAverage", "noise_multiplier", "epsilon_spent",
           "clip_rows", "centre_start", "stage_rounds", "split_component"]

#: Where the noise is added; the aggregate only, for now (the clients' own messages: issue 46).
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


def centre_start(family, n_clients, n_features):
    """One component at the centre of the bounds (0 in standard units) with unit variances: the public start
    the splitting schedule grows from (:func:`split_component`)."""
    scale = family.unit_scale(n_features) / 3.0
    return MixtureParams(np.ones((n_clients, 1)), np.zeros((n_clients, 1, n_features)),
                         np.broadcast_to(scale, (n_clients, 1, scale.size)).copy())


def stage_rounds(max_iter, n_components):
    """The rounds of each stage of the splitting schedule: ``max_iter`` shared as evenly as it goes between
    ``n_components`` stages (1, 2, ..., ``n_components`` components), the last taking the remainder."""
    base = max(max_iter // n_components, 1)
    rounds = [base] * (n_components - 1)
    return rounds + [max(max_iter - sum(rounds), 1)]


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
        the units the fit runs in (the box becomes ``[-1, 1]^d``), and so the scale of ``clip``; rows outside
        it are used as they are (the guarantee does not depend on them).
    clip : float, default=0.5
        The largest Euclidean norm of one client's update in one round, in those units (means and
        log-variances together). Updates beyond it are shrunk onto it: a small ``clip`` biases every
        round, a large one needs more noise.
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
        "noise": P.one_of(*NOISE),
    }

    def __init__(self, epsilon=4.0, delta=1e-6, bounds=None, clip=0.5, noise="central"):
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.clip = clip
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

    Stands for a strategy whose server averages the clients' shared components (FedEM: ``s_k = n_k / n``),
    and is that strategy in every other respect. Parameters are moved in the coordinates
    ``(theta, log_scale)`` (:meth:`~fedmm.families.Family.log_scale`), where an added noise leaves variances
    positive.
    """

    def __init__(self, strategy, family, n_features, clip, sigma, random_state):
        self._strategy, self.family, self.d = strategy, family, n_features
        self.clip, self.sigma, self.random_state = clip, sigma, random_state
        self.released = []  # every round's released vector (_coordinates)

    @property
    def releases(self):
        """How many noisy aggregates were released: the rounds privacy was spent on."""
        return len(self.released)

    def averaged(self, rounds):
        """``(theta, scale)`` of the mean of the last ``rounds`` released aggregates (Polyak-Ruppert averaging:
        once the rounds hover about the fixed point, their mean has ``rounds`` times less noise variance)."""
        return self._parameters(np.mean(self.released[-rounds:], axis=0))[1:]

    def __getattr__(self, name):
        return getattr(self._strategy, name)

    def server_step(self, messages, state, t):
        broadcast, state = self._strategy.server_step(messages, state, t)   # the strategy's own bookkeeping
        sent = self._sent
        share = messages.n / messages.n.sum()
        # The public point every client's update is taken from: the components it was sent, and equal
        # proportions (its own proportions it was sent are its own, not public).
        R = sent.theta.shape[1]
        reference = self._coordinates(take(sent, 0))[0]
        reference[:R] = 1.0 / R
        update = clip_rows(self._coordinates(messages) - reference, self.clip)
        noise = self.sigma * self.clip * share.max()
        released = reference + share @ update + noise * self.random_state.standard_normal(reference.size)
        self.mean_weights, theta, scale = self._parameters(released)
        self.released.append(released)
        K = messages.n.size
        params = broadcast.params._replace(theta=np.broadcast_to(theta, (K,) + theta.shape).copy(),
                                           scale=np.broadcast_to(scale, (K,) + scale.shape).copy())
        return broadcast._replace(params=params), state._replace(center=theta)

    def _coordinates(self, params):
        """(K, m): every client's contribution as one vector: proportions, means, log-variances (fixed
        variances left out)."""
        K = params.theta.shape[0]
        parts = [params.weights, params.theta.reshape(K, -1)]
        if self.family.estimates_scale:
            parts.append(self.family.log_scale(params.scale, self.d).reshape(K, -1))
        return np.concatenate(parts, axis=1)

    def _parameters(self, v):
        """``(mean proportions, theta, scale)`` of one vector of :meth:`_coordinates`."""
        R, p = self._sent.theta.shape[1:]
        weights, theta = v[:R], v[R:R + R * p].reshape(R, p)
        if not self.family.estimates_scale:
            return weights, theta, self._sent.scale[0]
        return weights, theta, self.family.exp_scale(v[R + R * p:].reshape(R, -1), self.d)


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
                         "the rounds the noise was calibrated for. Under privacy use the defaults of the start "
                         "(a random one in the bounds, or your own), n_init=1, and options the data do not "
                         "choose (no penalty='auto').")
