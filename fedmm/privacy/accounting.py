"""What a private fit's noise is calibrated for (:mod:`fedmm.privacy`): the privacy its rounds spend, composed under
Rényi DP (Mironov 2017) by Google's ``dp-accounting``; the rounds it runs and their stages; and a release's
sensitivity, to one client's rows (:func:`release_sd`) or to one row (:func:`row_sensitivity`)."""

import warnings

import numpy as np
from scipy import stats

#: The share of a component's own rows whose whitened deviation is clipped at the level of samples
#: (:func:`row_radius`).
ROW_QUANTILE = 0.999

#: The shares of one row's sensitivity that the counts, the deviations' and the squares' sums take
#: (:func:`sums_noise`): the squares the most, since their noise decides whether a component can narrow. On the
#: paper's design with 100 clients (3 seeds), against equal shares: the same largest error under central noise
#: (0.06-0.07 at epsilon 4), and under local noise at epsilon 4 0.19 against 6.5-10.
SUMS_SHARES = (0.05, 0.2, 0.75)

#: The rounds of ``rounds="auto"`` where a stage of them can carry the fit (:func:`calibrated_rounds`).
ROUNDS = 40

#: The most noise a stage's pull carries, as ``r^2`` over the stage's rounds (:func:`calibrated_rounds`): the
#: argument's scale is 1; measured (``docs/research/privacy.md``), 40 rounds did better up to 1.7 and the fewest
#: from 3.4, on the paper's design and on digits.
CARRIED = 2.0


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


def capped_sizes(n):
    """The clients' sizes capped at the median one: the noise every client's update drowns in grows with the
    largest share, so no one client's size (a claim like any, and a large client's a fact) may set it."""
    return np.minimum(n, np.median(n))


def capped_shares(n):
    """Each client's share ``n_k / n`` of the :func:`capped_sizes`."""
    sizes = capped_sizes(n)
    return sizes / sizes.sum()


def stage_rounds(rounds, n_components):
    """The rounds of each stage of the splitting schedule (1, 2, ..., ``n_components`` components): the last
    stage takes half of ``rounds`` (all but its first quarter is averaged into the model,
    :meth:`PrivateAverage.averaged`), the others share the rest evenly, a round each at least."""
    if n_components == 1:
        return [rounds]
    base = max((rounds // 2) // (n_components - 1), 1)
    stages = [base] * (n_components - 1)
    return stages + [max(rounds - sum(stages), 1)]


def row_radius(n_features):
    """How far one row's whitened deviation from a component may reach before it is clipped
    (:meth:`~fedmm.families.GaussianFamily.whitened_sums`): the square root of the chi-square 0.999 quantile with
    ``n_features`` degrees of freedom, so that the rows of a component itself are clipped one time in a thousand
    (the rows of others carry responsibilities near 0)."""
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
