"""Differential privacy: what a fit may reveal about one client's rows, as a number (``docs/privacy.md``).

``privacy=DifferentialPrivacy(epsilon, delta, bounds=...)`` on an estimator makes its fit
``(epsilon, delta)``-differentially private at the level of clients (the unit of federated learning's DP,
McMahan et al., ICLR 2018) for this **neighbouring relation**: two federations are neighbours when they have
the same clients with the same sizes (the roster, public: the server talks to every client and weighs it by
its size) and differ in one client's rows, which may be anything. Under local noise each client's own
messages are private for the same relation (any two data sets of one client). What the shared model, and so
every other client and whoever reads the fit (under local noise: the server too), learns about one client's
rows is then bounded whatever they are. A client present against one that sends nothing (its share lost, not
redistributed) is covered too (half the distance); two rosters of different clients are not neighbours.

The mechanism is DP-FedAvg's, applied to the rounds of a method that declares its private form
(:meth:`fedmm.methods.Method.private`: FedEM and FedGrEM at the level of clients, FedEM and pooled EM at the level
of samples; a method of one's own opts in likewise, ``docs/extending.md``):

- **units**: public, from ``bounds`` (the features' range, as diffprivlib asks for it); no client's rows
  are read for them, and the fit runs in them, so a change of the data's units with ``bounds`` changed
  alike leaves the fit the same, mapped back;
- **start**: public, one component at the bounds' centre with the box's variances, split into more at public
  rounds (:func:`split_component`), or the user's own means;
- **each round**: client ``k``'s update from the released components it was sent is one vector
  (:func:`encode`): its proportions less ``1 / R``, its means' displacement in the sent components' own units
  (Mahalanobis) and its log-variances' (:meth:`~fedmm.families.Family.log_scale`), clipped to Euclidean norm
  ``clip``. Shares ``s_k = n_k / n`` weigh the clients (sizes public and capped at the median one, the
  shares fixed from the roster before the first round: :func:`capped_shares`).

  - central noise: the server averages the clipped updates (under secure aggregation each coordinate within
    :func:`coordinate_range` too, what it can hold a party it cannot see to) with the shares and adds Gaussian
    noise of
    standard deviation ``2 sigma clip max_k s_k``, the average's sensitivity to one client's rows replaced
    (:func:`release_sd`). For FedGrEM this average is one step towards the centre of its central problem with penalty
    ``clip`` (:func:`robust_centre`), to which the rounds converge;
  - local noise: each client adds Gaussian noise of standard deviation ``2 sigma clip`` to its own clipped
    update (the distance between two points of the ball); the server averages the noisy updates (FedEM) or
    takes their :func:`robust_centre` (FedGrEM: one party's pull is at most its share of ``clip``, whatever
    it sends);
- **FedGrEM's clients** take their M-steps (gradient steps of the M-step's length, ``eta_rule="current"``: the
  rounds are few and fixed) from their own components, which each computes from the release
  and its own last estimate (:func:`personal_components`, the central problem's shrinkage step);
- **the model** is the mean of the last stage's released rounds after its first quarter, by which EM has
  settled (Polyak-Ruppert averaging); each split grows from the mean of its stage's second half
  (post-processing: nothing spent);
- **sizes** ``n_k`` are public (the server weighs clients by them); **log-likelihoods** and sufficient
  statistics are not released, so there is no stopping rule: a private fit runs exactly ``rounds`` rounds,
  the number its noise was calibrated for;
- each client's **mixing proportions** (and under FedGrEM its own components) are computed from its own rows
  and the release, and go back to it only: what it alone uses (joint differential privacy, Kearns et al.
  2014). The guarantee covers the shared components.

**At the level of samples** (``unit="sample"``: neighbouring federations have the same clients with the same sizes
and differ in one row of one client, which may be anything) the clients send the sums of their E-step instead, in
the released components' own units with each row's deviation clipped
(:meth:`~fedmm.families.GaussianFamily.whitened_sums`, pfl's centred and rescaled statistics), so that one row's
part of them is bounded whatever the client's size; the server adds them up, the noise goes on the total (or on each
client's sums under local noise; :func:`sums_noise`), and the release is the M-step of the noisy totals
(:func:`whitened_m_step`, :class:`PrivateSums`): DP-EM (Park et al., AISTATS 2017), federated. The server needs only
the total, so it runs under secure aggregation too; the noise is one row's among all the rows
(:func:`row_sensitivity`).

:mod:`fedmm.privacy.audit` checks these promises as an outsider would: neighbouring federations built to be
told apart, many fits of each, and a lower confidence bound on the epsilon the releases show.

``sigma`` is calibrated before the first round so that the ``rounds`` compose to ``(epsilon,
delta)`` under Rényi DP (Mironov 2017), by Google's ``dp-accounting`` (the ``privacy`` extra); the fitted
estimator's ``privacy_spent_`` is what its rounds spent by the same accountant. ``rounds="auto"`` (the default)
runs :data:`ROUNDS` where a stage of them can carry the fit, and the fewest otherwise (:func:`calibrated_rounds`).
"""

import numpy as np
from sklearn.base import BaseEstimator

from .. import _params as P
from ..algorithms.central import robust_centre
from ..units import Moments
from .accounting import (CARRIED, ROUNDS, ROW_QUANTILE, SUMS_SHARES, calibrated_rounds, capped_shares, capped_sizes,
                         epsilon_spent, noise_multiplier, release_sd, row_radius, row_sensitivity, stage_rounds,
                         sums_noise, sums_shares)
from .mechanisms import (COORDINATE_RANGE, LIMIT_LEVEL, SUMS_RANGE, VARIANCE_FLOOR, OutsideBoundsWarning,
                         bounded_sums, bounded_updates, centre_start, clip_rows, clip_to_bounds, coordinate_range,
                         decode, encode, in_the_box, local_update_limit, noised, outside_bounds_message,
                         released_proportions, scale_of, shared_point, sums_bounds, sums_from_vector, sums_limits,
                         sums_vector, update_size, whitened_m_step)
from .rounds import (PERSONAL_LEVEL, PrivateAverage, PrivateClients, PrivateSums, PrivateTransport,
                     as_under_secure_aggregation, personal_components, private_server, run_stages,
                     sent_params, split_component)

__all__ = ["DifferentialPrivacy", "PrivateTransport", "PrivateClients", "PrivateAverage", "PrivateSums",
           "noise_multiplier", "epsilon_spent", "calibrated_rounds", "release_sd", "local_update_limit",
           "coordinate_range", "as_under_secure_aggregation", "bounded_updates", "update_size", "sums_shares",
           "row_sensitivity", "sums_noise", "sums_limits", "bounded_sums", "sums_vector", "sums_bounds",
           "sums_from_vector", "clip_rows", "clip_to_bounds", "outside_bounds_message", "OutsideBoundsWarning",
           "centre_start", "stage_rounds", "split_component", "encode", "decode", "robust_centre",
           "personal_components", "released_proportions", "private_server", "run_stages"]

#: Where the noise is added: on the aggregate (a trusted server, or secure aggregation) or on each client's
#: own message (an untrusted server).
NOISE = ("central", "local")

#: Whom a private fit protects: a whole client with all its rows, or one row of one client.
UNITS = ("client", "sample")



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
        the units the fit runs in (the box becomes ``[-1, 1]^d``) and the start. Each client clips its rows
        into it before the fit and warns how many were outside (:class:`OutsideBoundsWarning`, a local check:
        nothing released). Bounds far wider than the data cost accuracy without a warning: the start and the
        noise are in the box's units.
    clip : float, default=1.0
        The largest norm of one client's update in one round, in the components' own units: proportions,
        mean displacements over the components' spread (:meth:`~fedmm.families.GaussianFamily.whiten`) and
        log-variances together, where a coordinate estimated from ``N`` rows moves by about
        ``1 / sqrt(N)``. Updates beyond it are shrunk onto it: too small and the rounds cannot carry the
        components where they belong, too large and the noise grows with it.
    rounds : int or "auto", default="auto"
        The rounds the fit runs, all of them (the log-likelihoods a stopping rule would read are not
        released), and the budget is shared between: ``sigma`` grows about as ``sqrt(rounds)``. At least
        ``n_components`` (a stage each); the estimator's ``max_iter`` does not apply. ``"auto"``: 40 where
        the clients' clipped pull can hold each stage's releases against the noise, and ``n_components`` with
        a warning where it cannot (too few clients for the budget: :func:`calibrated_rounds`); the fitted
        estimator's ``n_iter_`` says how many ran.
    noise : {"central", "local"}, default="central"
        Where the noise goes. ``"central"``: on the aggregate, by a server trusted with each client's update
        (or one that sees only their sum under secure aggregation); the noise is that of one client's share
        of the average. ``"local"``: on each client's own update before it leaves the client, for a server
        trusted with nothing; each message then carries the noise of a whole update, ``1 / max_k s_k`` times
        more (about ``K`` times for ``K`` equal clients), which the average shrinks by ``sqrt(K)`` only: it
        needs many clients (``docs/privacy.md``).
    unit : {"client", "sample"}, default="client"
        Whom the guarantee protects. ``"client"``: a whole client, all its rows (neighbouring federations
        have the same clients and sizes, public, and differ in one client's rows). ``"sample"``: one row of one
        client (they differ in one row, replaced by any other), for clients that hold other people's records, a
        hospital's patients say. The clients then send the sums of their E-step in the components' own units, each
        row's deviation from a component clipped (:meth:`~fedmm.families.GaussianFamily.whitened_sums`; ``clip``
        does not apply), and the noise on the sums is that of one row among all of them (:class:`PrivateSums`): far
        less than a client's. It runs ``method="fedem"`` and ``"pooled-em"``, the methods whose server needs only
        sums, under either noise.

    Attributes set on the fitted estimator
    --------------------------------------
    privacy_spent_ : tuple (epsilon, delta)
    noise_multiplier_ : float
        ``sigma``: the noise's standard deviation over the aggregate's sensitivity.
    releases_ : list of MixtureParams
        Every round's release in the data's units (what every client was sent: the released mean proportions
        (1, R), the shared components and their variances), which the guarantee covers and an audit reads
        (:mod:`fedmm.privacy.audit`).
    """

    _parameter_constraints = {
        "epsilon": P.real(0.0, np.inf, low_open=True, high_open=True),
        "delta": P.real(0.0, 1.0, low_open=True, high_open=True),
        "bounds": P.instance(tuple, list, text="a pair (lower, upper)"),
        "clip": P.real(0.0, np.inf, low_open=True, high_open=True),
        "rounds": P.any_of(P.integer(1), P.one_of("auto")),
        "noise": P.one_of(*NOISE),
        "unit": P.one_of(*UNITS),
    }

    def __init__(self, epsilon=4.0, delta=1e-6, bounds=None, clip=1.0, rounds="auto", noise="central",
                 unit="client"):
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.clip = clip
        self.rounds = rounds
        self.noise = noise
        self.unit = unit

    def validate(self):
        if self.bounds is None:
            raise ValueError("DifferentialPrivacy needs bounds=(lower, upper), the features' public range: the "
                             "units a private fit runs in cannot come from the clients' rows.")
        P.validate(self.get_params(deep=False), self._parameter_constraints)
        return self

    def box(self, n_features):
        """``(lower, upper)``, each of shape (n_features,), checked."""
        if len(self.bounds) != 2:
            raise ValueError(f"bounds must be a pair (lower, upper); got {len(self.bounds)} items.")
        lower, upper = (np.broadcast_to(np.asarray(b, dtype=float), (n_features,)) if np.ndim(b) <= 1 and
                        np.size(b) in (1, n_features) else None for b in self.bounds)
        if lower is None or upper is None:
            raise ValueError(f"bounds must be numbers or arrays of shape (n_features,) = ({n_features},).")
        if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) and np.all(lower < upper)):
            raise ValueError("bounds must be finite with lower < upper in every feature.")
        return lower, upper

    def moments(self, n_features):
        """The public :class:`fedmm.units.Moments` the units come from: those of the uniform distribution on
        the box, scaled so that the box's half-widths are the standard deviations (the box maps to
        ``[-1, 1]^d``); each feature's second moment, as a mixture's clients send theirs."""
        lower, upper = self.box(n_features)
        centre, half = (lower + upper) / 2.0, (upper - lower) / 2.0
        return Moments(centre, centre * centre + half ** 2, None, None)
