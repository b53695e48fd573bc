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

The mechanism is DP-FedAvg's, applied to the rounds of FedEM or FedGrEM:

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

**At the level of samples** (``unit="sample"``: neighbouring federations have the same clients with the same
sizes and differ in one row of one client, which may be anything) the
clients send the sums of their E-step instead, in the released components' own units with each row's deviation
clipped (:meth:`~fedmm.families.GaussianFamily.whitened_sums`, pfl's centred and rescaled statistics), so that one row's part of them is
bounded whatever the client's size; the server adds them up, the noise goes on the total (or on each client's
sums under local noise; :func:`sums_noise`), and the release is the M-step of the noisy totals
(:func:`whitened_m_step`, :class:`PrivateSums`): DP-EM (Park et al., AISTATS 2017), federated. The server needs
only the total, so it runs under secure aggregation too; the noise is one row's among all the rows
(:func:`row_sensitivity`).

:mod:`fedmm.privacy.audit` checks these promises as an outsider would: neighbouring federations built to be
told apart, many fits of each, and a lower confidence bound on the epsilon the releases show.

``sigma`` is calibrated before the first round so that the ``rounds`` compose to ``(epsilon,
delta)`` under Rényi DP (Mironov 2017), by Google's ``dp-accounting`` (the ``privacy`` extra); the fitted
estimator's ``privacy_spent_`` is what its rounds spent by the same accountant. ``rounds="auto"`` (the default)
runs :data:`ROUNDS` where a stage of them can carry the fit, and the fewest otherwise (:func:`calibrated_rounds`).
"""

import contextlib
import warnings

import numpy as np
from scipy import stats
from sklearn.base import BaseEstimator

from .. import _params as P
from ..algorithms.central import central_update, soft_threshold
from ..algorithms.fedem import FedEM, SharedComponents
from ..families import MixtureParams, pool_stats
from ..families.gaussian import WhitenedSums
from ..protocol import Broadcast, ClientMessage, put, take
from ..robust import trusted_sizes
from ..units import Moments

__all__ = ["DifferentialPrivacy", "PrivateTransport", "PrivateClients", "PrivateAverage", "PrivateSums", "noise_multiplier",
           "epsilon_spent", "calibrated_rounds", "release_sd", "local_update_limit", "coordinate_range", "as_under_secure_aggregation", "bounded_updates", "update_size", "sums_shares", "row_sensitivity", "sums_noise", "sums_limits", "bounded_sums", "sums_vector", "sums_bounds", "sums_from_vector", "clip_rows", "clip_to_bounds", "outside_bounds_message", "OutsideBoundsWarning", "centre_start", "stage_rounds", "split_component", "encode", "decode", "robust_centre",
           "personal_components", "released_proportions"]

#: Where the noise is added: on the aggregate (a trusted server, or secure aggregation) or on each client's
#: own message (an untrusted server).
NOISE = ("central", "local")
#: Whom a private fit protects: a whole client with all its rows, or one row of one client.
UNITS = ("client", "sample")
#: The methods a private fit runs, per unit: at the level of samples those whose server needs only the clients'
#: sums (:class:`PrivateSums`).
METHODS = {"client": ("fedem", "fedgrem"), "sample": ("fedem", "pooled-em")}
#: The share of a component's own rows whose whitened deviation is clipped at the level of samples
#: (:func:`row_radius`).
ROW_QUANTILE = 0.999
#: The shares of one row's sensitivity that the counts, the deviations' and the squares' sums take
#: (:func:`sums_noise`): the squares the most, since their noise decides whether a component can narrow. On the
#: paper's design with 100 clients (3 seeds), against equal shares: the same largest error under central noise
#: (0.06-0.07 at epsilon 4), and under local noise at epsilon 4 0.19 against 6.5-10.
SUMS_SHARES = (0.05, 0.2, 0.75)
#: Where a client's deviations' and squares' sums over its size may lie per coordinate, in the components' own
#: units (:func:`sums_limits`).
SUMS_RANGE = (1.0, 1.0, 2.0)
#: The rounds of ``rounds="auto"`` where a stage of them can carry the fit (:func:`calibrated_rounds`).
ROUNDS = 40
#: The most noise a stage's pull carries, as ``r^2`` over the stage's rounds (:func:`calibrated_rounds`): the
#: argument's scale is 1; measured (``docs/research/privacy.md``), 40 rounds did better up to 1.7 and the fewest
#: from 3.4, on the paper's design and on digits.
CARRIED = 2.0
#: The smallest variance a release keeps, over the box's half-width squared (:func:`in_the_box`).
VARIANCE_FLOOR = 1e-6
#: The chance that a client on the consensus keeps a part of its own components under FedGrEM
#: (:func:`personal_components`), over the whole federation.
PERSONAL_LEVEL = 0.05
#: What :class:`PrivateAverage` asks of FedEM's server rather than of the method: the shared-components
#: bookkeeping.
SERVER_SIDE = ("diagnostics", "center", "groups", "round_info", "fitted_attributes", "may_keep_moving",
               "restarting", "communication", "used_models")


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


def release_sd(sigma, share, noise):
    """The standard deviation of a client-level release's noise on each coordinate of the average update, per
    unit of ``clip``: ``2 sigma max_k s_k`` under central noise, ``2 sigma sqrt(sum_k s_k^2)`` under local noise
    (each client's own ``2 sigma clip`` in the shares' average).

    Neighbouring federations have the same clients with the same sizes (the roster is public: the server talks to
    every client, and the shares ``s_k`` are fixed from the sizes before the first round) and differ in one
    client's rows, which may be anything. Its clipped update then moves anywhere in the ball of radius ``clip``:
    by up to ``2 clip`` (the ball's diameter), and the shares' average by ``2 clip s_k``, the sensitivity the
    noise is ``sigma`` times. This is DP-FedAvg's bounded-sensitivity estimator with a fixed denominator (McMahan
    et al., ICLR 2018, Sec. 2 and Alg. 1) for replace-one neighbours: their add/remove sensitivity is ``clip
    s_k``, but a denominator computed from the clients present moves every other client's share when one is
    added, and the average by up to ``2 clip s_k`` (``docs/privacy.md``)."""
    if noise == "central":
        return 2.0 * sigma * share.max()
    return 2.0 * sigma * np.sqrt(np.sum(share ** 2))


def calibrated_rounds(privacy, n_samples, n_components, update_size):
    """The rounds a private fit runs: ``privacy.rounds``, or for ``"auto"`` :data:`ROUNDS` where a stage of
    them can carry the fit, and ``n_components`` (one round a stage, the fewest) where it cannot, with a
    warning. Decided from public numbers only (the budget, the sizes capped at the median one, the model's
    shape). fedmm's own rule, from no paper: its reasoning is below, its constant :data:`CARRIED` measured.

    Each round the clients' clipped average pulls the release at most ``clip`` towards EM's fixed point and the
    noise pushes it by ``r clip`` (its norm over the ``update_size`` coordinates of :func:`encode`, ``r =``
    :func:`release_sd` ``sqrt(update_size)``). Over a stage of ``n`` rounds the noise spreads the release by
    ``r clip sqrt(n)`` and the pull can undo ``n clip``: the pull holds the release within the stage where
    ``r^2`` is of order ``n`` or less (:data:`CARRIED` ``n``), for the early stages' ``n`` of
    :func:`stage_rounds`. ``r^2`` grows about as the rounds do
    (``sigma^2`` does), so where it fails for :data:`ROUNDS` it fails for any number, and the releases wander
    (to the box's edges); the fewest rounds wander least, each with the least noise. At the level of samples
    (``unit="sample"``) the noise is one row's among all the rows and :data:`ROUNDS` run."""
    if privacy.rounds != "auto":
        return privacy.rounds
    if privacy.unit == "sample":
        return ROUNDS
    sigma = noise_multiplier(privacy.epsilon, privacy.delta, ROUNDS)
    r = release_sd(sigma, capped_shares(np.asarray(n_samples, dtype=float)), privacy.noise) * np.sqrt(update_size)
    stage = stage_rounds(ROUNDS, n_components)[0]
    if r ** 2 <= CARRIED * stage:
        return ROUNDS
    warnings.warn(f"DifferentialPrivacy(epsilon={privacy.epsilon:g}, noise={privacy.noise!r}) over "
                  f"{len(n_samples)} clients: each round's noise would be {r:.1f} times the largest pull of the "
                  f"clients' clipped updates, beyond the {np.sqrt(CARRIED * stage):.1f} a stage of rounds can carry; "
                  f"the fit runs the fewest rounds ({n_components}, one per component) and stays near its public "
                  "start. "
                  "More clients, a larger epsilon or unit='sample' let it learn (docs/privacy.md).", UserWarning,
                  stacklevel=6)   # the user's fit(): fit, _fit, _fit_clients, _fit_private, here
    return n_components


#: The chance per round that an honest party's noisy update lies beyond :func:`local_update_limit`.
LIMIT_LEVEL = 1e-9


def local_update_limit(clip, sigma, m):
    """The largest norm an honest party's update under local noise reaches, but for a chance :data:`LIMIT_LEVEL`
    a round: its clipped update (at most ``clip``) plus its noise, ``2 sigma clip`` times a standard Gaussian
    vector of ``m`` coordinates, whose norm exceeds ``sqrt(m) + sqrt(2 t)`` with probability at most ``e^-t``
    (Laurent & Massart, Ann. Statist. 2000, Lemma 1). A reply beyond it is no honest party's."""
    return clip * (1.0 + 2.0 * sigma * (np.sqrt(m) + np.sqrt(2.0 * np.log(1.0 / LIMIT_LEVEL))))


#: How far one coordinate of a client's update may move the release in a round under secure aggregation, in
#: units of ``clip / sqrt(m)`` (:func:`coordinate_range`). Measured under SecAgg+ (10 clients, the paper's design,
#: epsilon 1e6): one party at the edges of the range left FedGrEM's honest clients at 1.21x their clean fit's
#: error with 2, 1.54x with 4, 7.1x with 6.2 (a rotated range's); clean fits the same with each. It costs accuracy
#: where the noise is large: FedEM at epsilon 4, 100 clients, 0.56 against 0.45 (median of 10 seeds).
COORDINATE_RANGE = 2.0


def coordinate_range(clip, m):
    """The range ``[-r, r]`` every coordinate of a client's update is clipped to under secure aggregation, ``r =
    COORDINATE_RANGE clip / sqrt(m)`` for updates of ``m`` coordinates: a vector in the ball of radius ``clip``
    spread over its coordinates has each about ``clip / sqrt(m)``, so honest updates are seldom clipped there,
    while a party at the range's edges in every coordinate adds a vector of norm ``COORDINATE_RANGE clip``, not
    ``sqrt(m) clip``. It is what secure aggregation can hold each party to (:mod:`fedmm.flower.secure`); a server
    that sees every update clips its norm alone (:attr:`PrivateAverage.bounded`)."""
    return float(COORDINATE_RANGE * clip / np.sqrt(m))


@contextlib.contextmanager
def as_under_secure_aggregation():
    """Private fits in this block clip every coordinate of an update to :func:`coordinate_range` as secure
    aggregation does (:attr:`PrivateAverage.bounded`): the in-process fit a fit under SecAgg+ equals, up to its
    quantization."""
    PrivateAverage.bounded = True
    try:
        yield
    finally:
        PrivateAverage.bounded = False


def bounded_updates(v, clip):
    """Every row of ``v`` (K, m) clipped into the ball of radius ``clip`` (:func:`clip_rows`) and then every
    coordinate into :func:`coordinate_range`: still in the ball, so the release's sensitivity is the ball's."""
    r = coordinate_range(clip, v.shape[-1])
    return np.clip(clip_rows(v, clip), -r, r)


def clip_rows(v, clip):
    """Every row of ``v`` (K, m) scaled into the Euclidean ball of radius ``clip`` (rows inside stay as they are),
    its norm taken in units of its largest coordinate so that no finite row overflows (a row of norm above 1e154
    would square to infinity and be clipped to 0). A non-finite row is no update: a clear error names it."""
    v = np.asarray(v, dtype=float)
    bad = np.flatnonzero(~np.all(np.isfinite(v), axis=1))
    if bad.size:
        raise ValueError(f"Update row(s) {bad[:10].tolist()} are not finite: there is nothing to clip; the client's "
                         "step diverged.")
    peak = np.maximum(np.abs(v).max(axis=1, keepdims=True), np.finfo(float).tiny)
    norms = peak * np.linalg.norm(v / peak, axis=1, keepdims=True)
    return v * np.minimum(1.0, clip / norms)


class OutsideBoundsWarning(UserWarning):
    """A client's rows lie outside the public ``bounds`` of a private fit: the client clipped them into the box
    (:func:`clip_to_bounds`). A local warning, from the client's own rows: nothing is released, nothing spent."""


def clip_to_bounds(X, lower, upper):
    """``(X clipped into [lower, upper], outside)``: one client's rows (or several clients' stacked) clipped to a
    private fit's public box, feature by feature, and the mask of the rows that had a feature outside it. The
    client does this before its first round, on its own rows (:class:`OutsideBoundsWarning`)."""
    X = np.asarray(X)
    lower, upper = np.asarray(lower, dtype=X.dtype), np.asarray(upper, dtype=X.dtype)
    outside = np.any((X < lower) | (X > upper), axis=1)
    return (np.clip(X, lower, upper) if outside.any() else X), outside


def outside_bounds_message(counts, sizes, names):
    """What a warning says of the clients ``names`` whose ``counts`` of their ``sizes`` rows lay outside the
    bounds (only those with some; the first five named)."""
    shown = [f"client {name!r}: {int(c)} of {int(n)} rows" for name, c, n in zip(names, counts, sizes)][:5]
    more = f"; {len(names) - 5} more client{'s' * (len(names) > 6)}" if len(names) > 5 else ""
    return (f"{int(np.sum(counts))} row(s) lie outside DifferentialPrivacy's bounds ({'; '.join(shown)}{more}); "
            "each client clipped its own into the bounds before the fit (a local check: nothing released, no "
            "budget spent). The fit describes the clipped rows: widen bounds to the features' public range.")


def row_radius(n_features):
    """How far one row's whitened deviation from a component may reach before it is clipped (:meth:`~fedmm.families.GaussianFamily.whitened_sums`):
    the square root of the chi-square 0.999 quantile with ``n_features`` degrees of freedom, so that the rows of
    a component itself are clipped one time in a thousand (the rows of others carry responsibilities near 0)."""
    return float(np.sqrt(stats.chi2.ppf(ROW_QUANTILE, n_features)))


def sums_shares(family):
    """The shares ``f`` of the sensitivity that the fields of :meth:`~fedmm.families.GaussianFamily.whitened_sums`
    take (:data:`SUMS_SHARES`, normalized; no squares where the model fixes the variances)."""
    shares = np.array(SUMS_SHARES[:3 if family.estimates_scale else 2])
    return shares / shares.sum()


def row_sensitivity(family):
    """How far one row replaced by any other moves the sums of :meth:`~fedmm.families.GaussianFamily.whitened_sums`,
    each field scaled by ``sqrt(f) / (1, c, c^2)`` (:func:`sums_shares`; ``c`` the rows' radius):
    ``sqrt(2 + 2 max(f_z - f_N, 0))``, ``f_N`` and ``f_z`` the counts' and the deviations' shares.

    A row adds ``v = (sqrt(f_N) g_r, sqrt(f_z) g_r z_r / c, sqrt(f_zz) g_r s(z_r) / c^2)_r``, with ``sum_r g_r =
    1``, ``||z_r|| <= c`` and squares ``s(z)`` (``z^2``, ``||z||^2`` or ``z z^T``) of norm at most ``||z||^2``, so
    ``||v|| <= 1``. Two rows' squares have a non-negative inner product (``(z . z')^2`` for full ones), so ``<v,
    v'> >= (f_N - f_z) sum_r g_r g'_r >= min(f_N - f_z, 0)`` and ``||v - v'||^2 <= 2 - 2 min(f_N - f_z, 0)``:
    1.52 with the default shares (1.79 for identity variances), below the 2 of the triangle inequality."""
    f = sums_shares(family)
    return float(np.sqrt(2.0 + 2.0 * max(f[1] - f[0], 0.0)))


def sums_noise(family, radius):
    """The standard deviations of the noise on each field of :meth:`~fedmm.families.GaussianFamily.whitened_sums`
    (``N``, ``Sz``, ``Szz``) per unit of the noise multiplier, for deviations within ``radius`` ``c``:
    ``S (1, c, c^2) / sqrt(f)``, the fields' shares ``f`` of the sensitivity (:func:`sums_shares`) and ``S`` the
    scaled sums' sensitivity to one row replaced (:func:`row_sensitivity`).

    Neighbouring federations have the same clients with the same sizes (public) and differ in one row of one
    client, which may be anything: the scaled sums move by at most ``S``, and carry noise ``sigma S`` (the
    Gaussian mechanism, composed by Rényi DP: Mironov 2017, Prop. 7 and Cor. 3), ``sigma S (1, c, c^2) /
    sqrt(f)`` scaled back."""
    return row_sensitivity(family) * np.array([1.0, radius, radius ** 2])[:len(sums_shares(family))] / \
        np.sqrt(sums_shares(family))


def sums_vector(sums):
    """(K, m): each client's :class:`~fedmm.families.gaussian.WhitenedSums` as one vector (what it sends under secure aggregation)."""
    return np.concatenate([f.reshape(len(f), -1) for f in sums if f is not None], axis=1)


def sums_bounds(family, sums, radius):
    """(m,): the largest magnitude :func:`sums_limits` allow each coordinate of :func:`sums_vector` of ``sums`` (one
    client's, over its size). Over these, a client's sums lie in ``[-1, 1]``: the one range secure aggregation
    clips every field to (:mod:`fedmm.flower.secure`)."""
    bounds = [max(-low, high) for low, high in sums_limits(family, sums, radius)]
    return sums_vector(type(sums)(*(None if f is None else np.full_like(f[:1], b, dtype=float)
                                    for f, b in zip(sums, bounds))))[0]


def sums_from_vector(v, family, point):
    """The inverse of :func:`sums_vector` for sums about the components of ``point``: ``v`` (K, m)."""
    R, p = point.theta.shape
    s = point.scale.shape[-1] if family.estimates_scale else 0
    N, Sz, Szz = np.split(v, [R, R + R * p], axis=1)
    return WhitenedSums(N, Sz.reshape(-1, R, p), Szz.reshape(-1, R, s) if s else None)


def sums_limits(family, sums, radius):
    """``[(low, high)]`` per field of ``sums`` (:class:`~fedmm.families.gaussian.WhitenedSums`): where a client's
    sums over its size may lie, in the components' own units. Counts in ``[0, 1]``; deviations within
    ``SUMS_RANGE[1]`` and squares within ``SUMS_RANGE[2]`` per coordinate (a spherical square sums ``p``
    coordinates: ``p`` times that; a full one's off-diagonal may be negative), and within what rows inside the
    ball of ``radius`` can add. An honest client's deviations average ``w_r`` times its component's displacement
    from the release, its squares ``w_r`` times its spread over the release's: at most about 1 near the fit, so
    the limits seldom bind there, and far from it they only slow a round. They bound what one party adds to the
    total whatever it sends (under secure aggregation too, :func:`sums_bounds`), and keep each row's
    sensitivity: clipping a coordinate never moves two sums apart."""
    p = sums.Sz.shape[-1]
    squares = SUMS_RANGE[2] * (p if family.covariance_type == "spherical" else 1)
    low = -1.0 if family.covariance_type in ("full", "tied") else 0.0
    return [(0.0, 1.0), (-min(SUMS_RANGE[1], radius), min(SUMS_RANGE[1], radius)),
            (low * min(squares, radius ** 2), min(squares, radius ** 2))]


def bounded_sums(family, sums, n, radius, sd):
    """Each client's sums (K rows) as the server counts them. A party's sums and size are claims
    (``docs/threat-model.md``): every coordinate of its sums over its size is kept within :func:`sums_limits`,
    widened by six of the noise standard deviations ``sd`` per field that each party's own noise adds under local
    noise (zeros otherwise); then each client counts by its trusted size (:func:`fedmm.robust.trusted_sizes`),
    its sums scaled by ``trusted / n_k``. Honest sums pass unchanged where no size exceeds the cap and no
    coordinate the limits; one party adds at most the sums of four median clients at the limits."""
    n = np.asarray(n, dtype=float)
    scale = trusted_sizes(n) / n
    sd = np.concatenate([sd, np.zeros(len(sums) - len(sd))])   # no squares' noise where there are no squares
    out = []
    for f, v, (low, high) in zip(sums, sd, sums_limits(family, sums, radius)):
        if f is None:
            out.append(None)
            continue
        size = n.reshape((-1,) + (1,) * (f.ndim - 1))
        out.append(np.clip(f, low * size - 6.0 * v, high * size + 6.0 * v) * scale.reshape(size.shape))
    return type(sums)(*out)


def noised(sums, sd, random_state):
    """Every field of ``sums`` with Gaussian noise of its standard deviation in ``sd`` added."""
    sd = np.concatenate([sd, np.zeros(len(sums) - len(sd))])   # no squares' noise where there are no squares
    return type(sums)(*(None if f is None else f + v * random_state.standard_normal(f.shape)
                        for f, v in zip(sums, sd)))


def whitened_m_step(family, total, point, sd):
    """EM's M-step (FedGrEM App. E.2; DP-EM's on noisy sums, Park et al. 2017, Alg. 1) of the totals ``total`` (:class:`~fedmm.families.gaussian.WhitenedSums`, leading axis 1) about the components of
    ``point``: ``delta_r = Sz_r / N_r`` moves each mean by ``unwhiten(delta_r)``, and the variances are the
    point's scaled by ``Szz_r / N_r - delta_r^2`` in their own units (``L (Szz_r / N_r - delta delta^T) L^T``
    for full ones, ``Sigma = L L^T``). ``sd``: the noise's standard deviations on the fields' sums (:func:`sums_noise`); each count is
    kept above three of its own and each scale factor above the squares' over ``N_r`` (at most 1), the noise's
    size in it (three of them froze the variances at their start under local noise).
    Returns ``(proportions (R,), theta (R, p), scale (R, s))``."""
    N = np.maximum(total.N[0], 3.0 * sd[0])
    delta = total.Sz[0] / N[:, None]
    theta = point.theta + family.unwhiten(delta, point.scale)
    if not family.estimates_scale:
        return N / N.sum(), theta, point.scale
    floor = np.minimum(sd[-1] / N, 1.0)
    if family.covariance_type == "full":
        R, p = delta.shape
        factor = total.Szz[0].reshape(R, p, p) / N[:, None, None] - delta[:, :, None] * delta[:, None, :]
        values, vectors = np.linalg.eigh(0.5 * (factor + np.swapaxes(factor, -1, -2)))
        factor = (vectors * np.maximum(values, floor[:, None])[:, None, :]) @ np.swapaxes(vectors, -1, -2)
        # L's columns are the unwhitened unit vectors: L^T stacked (R, p, p).
        L_t = np.swapaxes(family.unwhiten(np.broadcast_to(np.eye(p)[:, None, :], (p, R, p)), point.scale), 0, 1)
        return N / N.sum(), theta, (np.swapaxes(L_t, -1, -2) @ factor @ L_t).reshape(R, p * p)
    if family.covariance_type == "diag":
        factor = total.Szz[0] / N[:, None] - delta ** 2
    else:
        factor = (total.Szz[0] / N[:, None] - np.sum(delta ** 2, axis=-1, keepdims=True)) / delta.shape[-1]
    return N / N.sum(), theta, point.scale * np.maximum(factor, floor[:, None])


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
        client (they differ in one row, replaced by any other), for clients that
        hold other people's records, a hospital's patients say. The clients then send the sums of their
        E-step in the components' own units, each row's deviation from a component clipped (:meth:`~fedmm.families.GaussianFamily.whitened_sums`;
        ``clip`` does not apply), and the noise on the sums is that of one row among all of them
        (:class:`PrivateSums`): far less than a client's. It runs ``method="fedem"`` and ``"pooled-em"``, the
        methods whose server needs only sums, under either noise.

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
        ``[-1, 1]^d``)."""
        lower, upper = self.box(n_features)
        centre, half = (lower + upper) / 2.0, (upper - lower) / 2.0
        return Moments(centre, np.outer(centre, centre) + np.diag(half ** 2), None, None)


def in_the_box(family, theta, scale, lower, upper, floor=0.0):
    """``(theta, scale)`` of a release kept to what data in the box ``[lower, upper]`` (the fit's units) can
    have: means in the box, coordinate variances at most its half-widths squared (a full covariance's
    eigenvalues at most ``d`` times the largest) and at least :data:`VARIANCE_FLOOR` times them, and at least
    ``floor`` (R, 1), the noise's own scale in them where the release knows it. Post-processing of released
    numbers (nothing spent); it keeps the noise of a round from sending a component where no client's E-step
    can use it."""
    theta = np.clip(theta, lower, upper)
    if not family.estimates_scale:
        return theta, scale
    half2 = ((upper - lower) / 2.0) ** 2
    if family.covariance_type in ("full", "tied"):
        d = len(half2)
        values, vectors = np.linalg.eigh(scale.reshape(scale.shape[:-1] + (d, d)))
        values = np.clip(values, np.maximum(VARIANCE_FLOOR * half2.min(), floor), d * half2.max())
        return theta, ((vectors * values[..., None, :]) @ np.swapaxes(vectors, -1, -2)).reshape(scale.shape)
    if scale.shape[-1] == 1:   # spherical: the mean coordinate variance
        return theta, np.clip(scale, np.maximum(VARIANCE_FLOOR * half2.min(), floor), half2.max())
    return theta, np.clip(scale, np.maximum(VARIANCE_FLOOR * half2, floor), half2)


def shared_point(params):
    """The released components every client was sent: row 0 of ``params`` without its leading axis (weights
    (R,), theta (R, p), scale (R, s))."""
    return MixtureParams(*(field[0] for field in params))


def encode(family, n_features, params, point):
    """(..., m): updates from the public ``point`` (:func:`shared_point`) to ``params`` (weights (..., R),
    theta (..., R, p), scale (..., R, s)) as one vector each: the proportions less ``1 / R``, the means'
    displacements in the point's components' own units (:meth:`~fedmm.families.GaussianFamily.whiten`), the
    log-variances' (:meth:`~fedmm.families.Family.log_scale`). In these units every coordinate estimated from
    ``N`` samples has sd about ``1 / sqrt(N)``, so one ``clip`` suits them all."""
    R = point.weights.shape[-1]
    lead = params.weights.shape[:-1]
    parts = [params.weights - 1.0 / R, family.whiten(params.theta - point.theta, point.scale).reshape(lead + (-1,))]
    if family.estimates_scale:
        parts.append((family.log_scale(params.scale, n_features)
                      - family.log_scale(point.scale, n_features)).reshape(lead + (-1,)))
    return np.concatenate(parts, axis=-1)


def update_size(family, n_features, n_components):
    """``m``, the length of one client's update (:func:`encode`) for ``n_components`` components."""
    one = centre_start(family, 1, np.zeros(n_features))
    return n_components * encode(family, n_features, one, shared_point(one)).shape[-1]


def decode(family, n_features, v, point):
    """The inverse of :func:`encode`: ``(weights, theta, log-variances)``, ``point`` moved by the updates
    ``v`` (..., m)."""
    R, p = point.theta.shape
    lead = v.shape[:-1]
    theta = point.theta + family.unwhiten(v[..., R:R + R * p].reshape(lead + (R, p)), point.scale)
    log_scale = family.log_scale(point.scale, n_features)
    log_scale = np.broadcast_to(log_scale, lead + log_scale.shape)
    if family.estimates_scale:
        log_scale = log_scale + v[..., R + R * p:].reshape(log_scale.shape)
    return 1.0 / R + v[..., :R], theta, log_scale


def scale_of(family, n_features, log_scale, point):
    """The variances of the log-variances ``log_scale`` (the point's own where the model fixes them)."""
    if family.estimates_scale:
        return family.exp_scale(log_scale, n_features)
    return np.broadcast_to(point.scale, log_scale.shape[:-1] + point.scale.shape[-1:]).copy()


def released_proportions(weights):
    """The released mean proportions (noisy: some may be at or below 0) as proportions: floored at 1e-3 and
    summing to 1. A new stage of the splitting schedule starts every client from them (a client's own come back
    with its first E-step), and across parties they are what the server has of every client's."""
    weights = np.maximum(weights, 1e-3)
    return weights / weights.sum()


def capped_sizes(n):
    """The clients' sizes capped at the median one: the noise every client's update drowns in grows with the
    largest share, so no one client's size (a claim like any, and a large client's a fact) may set it."""
    return np.minimum(n, np.median(n))


def capped_shares(n):
    """Each client's share ``n_k / n`` of the :func:`capped_sizes`."""
    sizes = capped_sizes(n)
    return sizes / sizes.sum()


def robust_centre(updates, share, clip):
    """The centre of FedGrEM's central problem (eq. (6); :func:`fedmm.algorithms.central.central_update`) over
    the clients' updates (K, m) with weights ``share`` and penalty ``clip``: the Huber M-estimate of their
    location, where a client farther than ``clip`` pulls with a force ``clip`` whatever its distance. Under
    local noise every update lies far beyond ``clip``, and it is their weighted geometric median."""
    return central_update(updates[:, None, :], np.ones(len(share)), clip, weights=share).center[0]


def personal_components(family, theta, point, N, centre_variance, n_clients):
    """Each client's own components under FedGrEM (its central problem's ``Delta_k`` step, eq. (6)): the
    released ``point`` plus the client's own displacement ``theta - point`` (K, R, p), in whitened units,
    soft-thresholded at ``lambda_kr = sqrt(q (1 / N_kr + v))``.

    ``N_kr`` is the client's own count of the component's samples and ``v`` the release's noise variance per
    whitened coordinate (:attr:`PrivateAverage.centre_variance`): a client on the consensus is displaced by
    about ``N(0, (1 / N_kr + v) I_p)``, and ``q`` is the ``1 - 0.05 / (K R)`` quantile (``K`` the federation's
    ``n_clients``, whatever rows ``theta`` has) of chi-square with
    ``p`` degrees of freedom, so that with probability 0.95 every such client takes the consensus exactly,
    while a client farther than the noise keeps the part of its own estimate beyond it. Computed by each
    client from its own estimate and the release: nothing more is released."""
    R, p = theta.shape[1:]
    q = stats.chi2.ppf(1.0 - PERSONAL_LEVEL / (n_clients * R), p)
    lam = np.sqrt(q * (1.0 / np.maximum(N, 1.0) + centre_variance))
    z = family.whiten(theta - point.theta, point.scale)
    return point.theta + family.unwhiten(soft_threshold(z, lam), point.scale)


def sent_params(family, point, own, n, centre_variance=None, n_clients=None):
    """The parameters the private round of clients ``own`` (K rows) starts from: each one's own proportions
    ``own.weights``, the release ``point``'s variances, and its components: the release's, or under FedGrEM
    (``centre_variance`` given) its own about them, from its own last estimate ``own.theta`` and sizes ``n``
    (:func:`personal_components`; ``n_clients`` the federation's, K by default)."""
    K = len(own.weights)
    if centre_variance is None:
        theta = np.broadcast_to(point.theta, (K,) + point.theta.shape).copy()
    else:
        theta = personal_components(family, own.theta, point, n[:, None] * own.weights, centre_variance,
                                    K if n_clients is None else n_clients)
    return MixtureParams(own.weights, theta, np.broadcast_to(point.scale, (K,) + point.scale.shape).copy())


class PrivateAverage:
    """The server's side of a private fit: the clients' updates from the released components, aggregated into
    the next release (see the module docstring).

    Under central noise the updates are clipped and averaged with shares ``s_k``, and Gaussian noise is added:
    for FedEM and FedGrEM alike (the clipped average is one step towards FedGrEM's centre with penalty
    ``clip``, :func:`robust_centre`). Under local noise the clients' updates come noised: FedEM averages
    them, FedGrEM takes their :func:`robust_centre`. Every other call goes to the method (its clients' side)
    or, on the server's side, to FedEM's shared-components bookkeeping. Variances move as log-variances
    (:meth:`~fedmm.families.Family.log_scale`), so noise leaves them positive.
    """

    #: Whether every coordinate of an update is clipped to :func:`coordinate_range` as well as its norm to ``clip``:
    #: set by a transport that cannot see one client's update (secure aggregation, :mod:`fedmm.flower.secure`).
    bounded = False

    def __init__(self, strategy, family, n_features, clip, sigma, random_state, noise="central", box=None):
        self._strategy, self.family, self.d = strategy, family, n_features
        self.box = box   # (lower, upper) in the fit's units (:func:`in_the_box`); None: unbounded
        self.clip, self.sigma, self.random_state, self.noise = clip, sigma, random_state, noise
        # Under local noise the clients draw their own, not from the server's draws (across parties they draw
        # from their own entropy); in one process from this seed, so that the server's draws (the splits) are
        # the same in one process and across parties.
        self.clients_seed = random_state.randint(2 ** 31 - 1) if noise == "local" else None
        self.robust = strategy.name == "fedgrem"
        self._server = FedEM()
        self.centre_variance = None
        self.released = []  # every round's release: (mean proportions, theta, log-variances)

    @property
    def releases(self):
        """How many noisy aggregates were released: the rounds privacy was spent on."""
        return len(self.released)

    def __getattr__(self, name):
        return getattr(self._server if name in SERVER_SIDE else self._strategy, name)

    def server_start(self, family, start, n_k):
        """The public start, alike for every client, and the release's noise variance per whitened coordinate
        from the public sizes (``centre_variance``: what the clients' personal step allows for)."""
        self.share = capped_shares(n_k)   # fixed before the first round: a reply's own size is not read again
        self.centre_variance = (self.clip * release_sd(self.sigma, self.share, self.noise)) ** 2
        self.point = shared_point(start)
        return Broadcast(start), SharedComponents(self.point.theta)

    def server_step(self, messages, state, t):
        share = self.share
        update = encode(self.family, self.d, messages, self.point)
        if self.noise == "central":
            noise = self.clip * release_sd(self.sigma, share, self.noise)
            clipped = bounded_updates(update, self.clip) if self.bounded else clip_rows(update, self.clip)
            mean = share @ clipped + noise * self.random_state.standard_normal(update.shape[1])
        elif self.robust:
            mean = robust_centre(update, share, self.clip)
        else:
            mean = share @ update
        weights, theta, log_scale = decode(self.family, self.d, mean, self.point)
        return self._release(weights, theta, scale_of(self.family, self.d, log_scale, self.point), messages.n.size)

    def _release(self, weights, theta, scale, n_clients, floor=0.0):
        """The round's release, kept in the box (variances at least ``floor``), recorded and broadcast to
        ``n_clients`` clients (each one's own proportions stay with it: the clients' side keeps them)."""
        if self.box is not None:
            theta, scale = in_the_box(self.family, theta, scale, *self.box, floor=floor)
        self.released.append((weights, theta, self.family.log_scale(scale, self.d)))
        self.point = MixtureParams(weights, theta, scale)
        every = lambda a: np.broadcast_to(a, (n_clients,) + a.shape).copy()  # noqa: E731
        return Broadcast(MixtureParams(every(weights), every(theta), every(scale))), SharedComponents(theta)

    def release_history(self):
        """Every round's release, in order, as parameters of one row: mean proportions (1, R), theta (1, R, p),
        scale (1, R, s) (R grows with the splits): what every client was sent, which the guarantee covers."""
        fixed = self.point.scale[:1]   # the model's own variances, where it fixes them

        def scale(log_scale):
            if self.family.estimates_scale:
                return self.family.exp_scale(log_scale, self.d)
            return np.broadcast_to(fixed, (len(log_scale),) + fixed.shape[1:]).copy()
        return [MixtureParams(weights[None], theta[None], scale(log_scale)[None])
                for weights, theta, log_scale in self.released]

    def averaged(self, rounds):
        """The mean of the last ``rounds`` releases as a point (mean proportions, theta, scale) (Polyak-Ruppert
        averaging: once the rounds hover about the fixed point, their mean has ``rounds`` times less noise
        variance), variances averaged as log-variances."""
        weights, theta, log_scale = (np.mean(part, axis=0) for part in zip(*self.released[-rounds:]))
        return MixtureParams(weights, theta, scale_of(self.family, self.d, log_scale, self.point))


class PrivateSums(PrivateAverage):
    """The server's side of a private fit at the level of samples (``unit="sample"``): DP-EM's release (Park et
    al., AISTATS 2017) with pfl's centred and rescaled statistics, federated.

    Each round every client sends the sums of its E-step about the released components, at its own proportions,
    in the components' own units (:meth:`~fedmm.families.GaussianFamily.whitened_sums`). The server adds them up, with Gaussian noise of
    ``sigma`` times :func:`sums_noise` on the totals under central noise (under local noise each client's own
    on its sums), and the M-step of the noisy totals (:func:`whitened_m_step`) is the release: the shared
    components, and the pooled proportions. FedEM's clients keep their own proportions; pooled EM's take the
    released ones.
    """

    def __init__(self, strategy, family, n_features, sigma, random_state, noise="central", box=None):
        super().__init__(strategy, family, n_features, None, sigma, random_state, noise, box)
        self.radius = row_radius(family.param_dim(n_features))
        self.row_sd = sigma * sums_noise(family, self.radius)   # on one party's sums
        self.robust, self.pooled = False, strategy.name == "pooled-em"
        self.centre_variance = 0.0

    def server_start(self, family, start, n_k):
        # The noise on the totals: the server's once, or every client's own.
        self.sums_sd = self.row_sd * (np.sqrt(len(n_k)) if self.noise == "local" else 1.0)
        self.point = shared_point(start)
        return Broadcast(start), SharedComponents(self.point.theta)

    def server_step(self, messages, state, t):
        total = pool_stats(messages.stats)
        if self.noise == "central":
            total = noised(total, self.row_sd, self.random_state)
        return self._release(*whitened_m_step(self.family, total, self.point, self.sums_sd), messages.n.size)


class PrivateTransport:
    """What every private fit's transport of clients shares: their sizes, ledger and family through, the public
    divergence unit, no data scale asked at the units, no log-likelihood."""

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

    def loglik(self, params):
        return np.zeros(self.n_clients)


class _Refused(ValueError, AttributeError):
    """A query a private fit's clients refuse: a clear ``ValueError``, and no attribute to ``hasattr``."""


class PrivateClients(PrivateTransport):
    """The clients' side of a private fit in one process: a transport of clients (:mod:`fedmm.clients`) that
    releases nothing but the private rounds.

    Each client keeps what it estimated itself (its proportions, and under FedGrEM its components, from which
    it takes its own part of the release, :func:`personal_components`). Under local noise it clips its
    update from the components it was sent and adds its own Gaussian noise, ``2 sigma clip`` (its update may
    be any point of the ball), before it replies. Log-likelihoods and sufficient statistics are withheld
    (zeros and none: the server never reads them). Every other query a fit could make reads the clients' rows
    outside the rounds the noise was calibrated for, so it fails with what to change instead.
    """

    def __init__(self, clients, average):
        super().__init__(clients, average)
        self.own = None
        seed = getattr(average, "clients_seed", None)
        self._noise = None if seed is None else np.random.RandomState(seed)

    def start(self, strategy, params):
        self._clients.start(strategy, params)
        self.own = params

    def step(self, strategy, broadcast, heard=None):
        average, family = self._average, self.family
        point = shared_point(broadcast.params)
        sums = isinstance(average, PrivateSums)
        sent = sent_params(family, point, self._own(point, for_rows=sums), self.n_samples,
                           average.centre_variance if average.robust else None)
        if sums:   # the sums alone leave the clients, under local noise with each one's own noise on them
            return self._sums(sent, heard)
        messages, replied = self._clients.step(strategy, broadcast._replace(params=sent), heard)
        self.own = put(self.own, replied, MixtureParams(messages.weights, messages.theta, messages.scale))
        if average.noise == "local":
            update = clip_rows(encode(family, average.d, messages, point), average.clip)
            noise = 2.0 * average.sigma * average.clip
            update = update + noise * self._noise.standard_normal(update.shape)
            weights, theta, log_scale = decode(family, average.d, update, point)
            messages = messages._replace(weights=weights, theta=theta,
                                         scale=scale_of(family, average.d, log_scale, point))
        return messages._replace(loglik=np.zeros_like(messages.loglik), stats=None), replied

    def final(self, point, centre_variance):
        """The fitted parameters of every client about the final release ``point``: its own proportions (pooled
        EM: the released ones) and, under FedGrEM, its own components (:func:`sent_params`)."""
        return sent_params(self.family, point, self._own(point), self.n_samples,
                           centre_variance if self._average.robust else None)

    def _sums(self, sent, heard):
        """The round at the level of samples: the clients ``heard`` send their :meth:`~fedmm.families.GaussianFamily.whitened_sums` at ``sent``
        (under local noise each with its own noise on them), and keep their own proportions from them."""
        average = self._average
        replied = np.arange(self.n_clients) if heard is None else np.asarray(heard)
        sums = self._clients.whitened_sums(take(sent, replied), average.radius, heard)
        n = self.n_samples[replied]
        self.own = put(self.own, replied, self.own.take(replied)._replace(weights=sums.N / n[:, None]))
        local = average.noise == "local"
        if local:
            sums = noised(sums, average.row_sd, self._noise)
        sums = bounded_sums(self.family, sums, n, average.radius, average.row_sd * local)
        K = len(replied)
        messages = ClientMessage(n, np.zeros(K), np.zeros((K, sums.N.shape[1])), sent.theta[replied],
                                 sent.scale[replied], sums)
        return messages, replied

    def _own(self, point, for_rows=False):
        """What the clients keep, with the proportions of the release ``point`` for their own under pooled EM, and
        ``for_rows`` (each row private) in every E-step: proportions a client computed from its own sums would
        carry one of its rows into every later round's sums, beyond the one row's sensitivity the noise covers.
        A client's own proportions are still its fitted ones (:meth:`final`)."""
        if not (for_rows or getattr(self._average, "pooled", False)):
            return self.own
        return self.own._replace(weights=np.broadcast_to(released_proportions(point.weights),
                                                         self.own.weights.shape).copy())

    def __getattr__(self, name):
        # An AttributeError too, so that hasattr (the engine asking whether a transport has a query) says no.
        raise _Refused(f"A private fit does not ask its clients for {name!r}: it would read their rows outside "
                         "the rounds the noise was calibrated for. Under privacy use the default start (the "
                         "public splitting start, or your own means_init), n_init=1, and options the data do not "
                         "choose.")
