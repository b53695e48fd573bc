"""FedGrEM's outlier tests (fedmm's; the paper has none): each client's score from its distances to the
consensus and from its variances, and the pull on the centre a score leaves it
(:class:`fedmm.algorithms.fedgrem.FedGrEM`, ``outlier_scores_``, ``reweighting``)."""

import numpy as np
from scipy.special import polygamma
from scipy.stats import beta, chi2

from ..reductions import fill_empty_medians
from ..robust import client_median

#: Level of the outlier test per client (:func:`outlier_scores`).
OUTLIER_LEVEL = 0.01

#: Level of the test of a client's variances (:meth:`fedmm.algorithms.fedgrem.FedGrEM._outlier_scores`), a tenth
#: of the means': EM's variances have heavier tails than the chi-square's, and a lie that matters is gross (a
#: factor 4, where :func:`fedmm.algorithms.variances.pool_variances` starts to leave a party out, is
#: ``N / 2 d (log 4)^2``, about 230 on the attack suite's design, against a threshold of 18). Measured: no honest
#: client flagged by it in 36 fits of three designs.
VARIANCE_LEVEL = 0.001

#: The level at which a client's rows reject FedGrEM's estimate for their own fit (:func:`rejects_estimate`), the
#: variances' test's: the suspicion it goes with reacts to the same sampling noise, so the two together are not
#: at the product of their levels (at 1%, 13 of 1,872 honest clients at ``h = 0.1`` took their own fit, 9 of
#: them worse; ``docs/research/every-client.md``).
OWN_LEVEL = 0.001


def outlier_scores(distance, N, p, level=OUTLIER_LEVEL, reference=None, rank=None, least_scale=0.0):
    """Each client's outlier score: above 1, its estimates differ from the consensus more than the
    clients' own spread explains, at level ``level``. fedmm's test: the paper has none (its theory
    only needs the central update to leave outliers unpooled, Sec. 2.3).

    ``z_kr = N_kr ||theta_tilde_kr - nu_bar_r||^2`` (distances in noise units, ``N_kr = n_k w_kr``
    the component's effective size) is about ``chi2_p`` for a client whose component ``r`` equals the
    consensus; a client's statistic is ``T_k``, the ``rank``-th smallest of its ``z_kr`` (the largest by
    default), whose null law is that order statistic of ``R`` such variables. Its scale is estimated from
    the clients themselves, robustly: ``T_k`` divided by ``median_k T_k / q(1/2)``, where
    ``q(u) = F^{-1}(B^{-1}(u))``, ``B`` the Beta(rank, R - rank + 1) law of a uniform sample's order statistic
    (``u^{1/R}`` for the largest); so the E-step's extra noise, and a similarity ``h > 0`` shared by most
    clients, do not count as evidence. The score is the calibrated ``T_k`` over ``q(1 - level)``. On the
    paper's GMM design the measured rate of honest clients flagged is 1.7% at ``h = 0`` and at ``h = 0.5``
    (20 seeds; ``tests/test_fedgrem_statistics.py``), and every adversary of ``tests/test_adversarial.py`` is
    flagged: the level is 1% because the statistic's tail is heavier than the chi-square's (5% flagged 6.7%
    at ``h = 0``).

    ``reference`` (a mask of clients) calibrates the scale on those clients alone: FedGrEM's largest group
    when the clients form several (:func:`fedmm.algorithms.central.grouped_central_update`), whose clients'
    distances to their centre are what the null law describes.

    ``least_scale`` floors the estimated scale where the null law's own is known: the clients' spread may add
    noise to it (the E-step's), never take any away, and with ten clients their median is low by a quarter by
    chance (:meth:`fedmm.algorithms.fedgrem.FedGrEM._outlier_scores`'s variances).
    """
    R = distance.shape[1]
    rank = R if rank is None else rank
    T = np.sort(N * distance ** 2, axis=1)[:, rank - 1]
    q = lambda u: chi2.ppf(beta.ppf(u, rank, R - rank + 1), p)
    scale = max(np.median(T if reference is None else T[reference]) / q(0.5), least_scale)
    if not scale > 0:
        return np.zeros(len(T))
    return T / scale / q(1.0 - level)


def centre_pull(distance, N, p):
    """(K,) how far each client pulls on the centre in the next round (``FedGrEM(reweighting=True)``, with one
    centre): ``clip(2 - score_k, 0, 1)``, ``score_k`` the :func:`outlier_scores` of its distances to the centre (in
    noise units, ``N`` the components' sizes, ``p`` their parameters). Fully while the centre explains its
    estimates, not at all from twice the test's threshold, continuously between, as the pooled variances fade
    (:func:`fedmm.algorithms.variances.pool_variances`: a switch there made a client at the threshold flip every
    round). Everyone pulls fully when a third of the clients or more would lose weight: the theory bounds the
    adversaries' share below it (Theorem A.8), so so many clients far from their centre are the clients' own spread.

    Measured (``docs/research/groups.md``): with three overlapping components (``make_grouped_gmm(n_groups=1,
    spread=0.5)``) and an outlier client, the paper's problem let the outlier win the component the honest
    clients held least (median error 4.10 against 1.76 reweighted, 10 seeds).
    """
    pull = np.clip(2.0 - outlier_scores(distance, N, p), 0.0, 1.0)
    return pull if 3 * (pull < 1.0).sum() < len(pull) else np.ones(len(pull))


def scale_deviation(family, scale, n_features, reference, empty=None):
    """(K, R or 1, q) each client's variances ``scale`` from the median client's among ``reference`` (a mask),
    coordinate by coordinate as log-variances in noise units (:meth:`fedmm.families.Family.log_scale`): a
    variance estimated from ``N_kr`` samples has ``N_kr ||deviation_kr||^2`` about ``chi2_q``, the null law
    :func:`outlier_scores` calibrates. Ratios of variances, so the same in any units. An ``empty`` component
    (:func:`fedmm.algorithms.variances.empty_components`) has no variance of its own, only the squared mean the
    server last sent: it counts in the median at its client's median over the components it holds rows of, as in
    the noise units (:func:`fedmm.algorithms.variances.held_variances`)."""
    v = np.ascontiguousarray(family.log_scale(scale, n_features))   # full: a transposed layout (deviation_norms)
    if empty is not None and v.shape[1] == empty.shape[1] and empty.any():
        fill_empty_medians(v, empty)    # in place: v is the logarithms' own array
    v -= client_median(v if reference.all() else v[reference])
    return v


def deviation_norms(deviation):
    """(K, R or 1) ``||deviation_kr||`` of :func:`scale_deviation`, squared in place (spent: no (K, R, q) copy,
    40 MB at 10^5 clients), the same numbers as ``np.linalg.norm(deviation, axis=-1)`` of a C-ordered ``deviation``
    (the sum's rounding follows the layout)."""
    return np.sqrt(np.square(deviation, out=deviation).sum(axis=-1))


def variance_scores(distance, q, N, reference):
    """Each client's outlier score from its variances' distances ``||deviation_kr||`` (K, R or 1) of
    :func:`scale_deviation` (``q`` coordinates each), ``N`` (K, R) the components' sizes: :func:`outlier_scores`
    with :func:`variance_information`'s sizes, for gross lies. The median component's (a lie is in all of them; an
    E-step that mixes two of a client's components inflates one component's variances by chance, measured up to
    1.4 times the largest's 0.5% quantile on the attack suite's design), at level :data:`VARIANCE_LEVEL`; their
    null scale is known, so the clients' estimate of it is floored there."""
    return outlier_scores(distance, variance_information(N), q, VARIANCE_LEVEL, reference,
                          rank=(distance.shape[1] + 1) // 2, least_scale=1.0)


def variance_information(N):
    """``2 / psi'((N - 1) / 2)``: what the size ``N`` is worth to a log-variance. A variance from ``N`` Gaussian
    rows has ``nu = N - 1`` degrees of freedom, and its logarithm the variance ``psi'(nu / 2)`` (the trigamma
    function; the log of a chi-square's), which :meth:`fedmm.families.Family.log_scale`'s ``2 / N`` only
    approaches for large ``N``: at ``N = 5``, 0.645 against 0.4; a component of one row has none. Measured on
    the attack suite's design (10 clients of 120 rows, ``R = 5``): with ``N`` itself, a component of one row
    flagged an honest client."""
    nu = np.maximum(N - 1.0, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(nu > 0, 2.0 / polygamma(1, nu / 2.0), 0.0)


def sole_holders(N):
    """(K,) bool: the clients that share no component with the others: of every component they hold a row of (``N_kr``
    of ``N`` (K, R) at least 1) they hold most of the rows (above half of ``sum_j N_jr``). Those components' centres
    are their own estimates, so a distance to them (:func:`outlier_scores`) cannot tell them from the others: a
    client far from the rest whose rows the fit gave components of their own, the others' rows the rest (three
    clients of iris, one shifted 3 sds: the shifted client's rows all in one cluster, ARI 0 against its own EM's
    0.5-0.85; ``docs/research/every-client.md``). A client that shares a component (an island of penguins, whose
    Adelie penguins the other islands have too) is not one."""
    return ((N > 0.5 * N.sum(axis=0)) | (N < 1.0)).all(axis=1) & (N >= 1.0).any(axis=1)


def rejects_estimate(params, loglik, own, n_k, n_parameters, located_loglik, among=None, level=OWN_LEVEL):
    """(K,) bool: the clients (of ``among``, a (K,) bool; all by default) whose rows reject their estimate
    ``params`` (log-likelihoods ``loglik``) for their own fit ``own`` (a :class:`fedmm.initialization.Start` with
    ``own_loglik``).

    Two likelihood-ratio tests (Wilks 1938), each at ``level``: the estimate is a point the client's own fit could
    have reached had its parameters been that. Their union's level is at most twice that, and near ``level``
    where, as here, the second statistic is a part of the first.

    - All parameters: ``2 (l_own - l)`` against the chi-square with the mixture's ``n_parameters`` degrees of
      freedom.
    - The locations alone (means, or coefficients): ``2 (l_loc - l)``, ``l_loc`` the log-likelihood at the estimate
      with the own fit's locations, against the chi-square with theirs, ``R p``. ``l_loc`` is at most the
      likelihood maximised over the locations at the estimate's proportions and variances, so the test keeps its
      level; where the estimate is off in its locations only (a client far from every group, its components pooled
      onto others'), it does not spend degrees of freedom on the variances: with all of them, 31 of 117 such
      clients stayed at 1.5-3.1x their own EM's error (``docs/research/every-client.md``). ``l_loc`` costs a query
      (``located_loglik(which)``: (K,), at the estimate with the own fit's locations for the clients ``which``),
      asked only where the locations' test could decide (the whole statistic above its critical value) and the
      whole test does not.

    Only an own fit whose every component holds ``n_k w_r`` of at least one component's parameters in rows counts:
    a component collapsed on a few rows has a likelihood without bound (one of 12 clients of
    ``validation/every_client.py``'s 9 + 3, a component on one row: 37 nats above FedGrEM, its means 3 off).

    Both statistics are divided by the others' overfitting, ``max(1, m / median(chi2_q))``, ``m`` the median of the
    whole statistics of the clients not under test (outside ``among``, over the own fits that count): the dispersion
    of a quasi-likelihood (McCullagh & Nelder 1989), estimated from the clients the federation fits. Wilks's
    chi-square is the law of a regular model's ratio; a mixture's is not (its likelihood is irregular where
    components overlap, Hartigan 1985), and an own fit by EM from several starts gains more over the truth than the
    chi-square allows. On the paper's MoR design at ``h = 0`` (every honest client's truth the consensus's) honest
    clients' statistics are 100-240 (median about 150, the chi-square's median 63) against a critical value of 105,
    and the suspects among them took their own EM, up to 6.9 from the truth, in 8 fits of 40 (the design's mean
    largest error 0.343 -> 0.567, with the outlier 0.371 -> 1.224). Where the model is regular the others' median is
    the chi-square's and the tests are Wilks's (``validation/every_client.py``'s Gaussian shapes: 5-26 against a
    median of 19.3); with fewer than three such clients, against the chi-square (``docs/research/every-client.md``).
    """
    R, p = params.theta.shape[1:]
    sizes = n_k[:, None] * own.params.weights
    counts = (sizes >= (n_parameters - (R - 1)) / R).all(axis=1)
    tested = counts & (True if among is None else among)
    statistic = 2.0 * (own.own_loglik - loglik)
    reference = counts & ~tested    # the clients not under test: no suspect sets its own null
    # A median of fewer than three is one or two clients' statistics, not the federation's.
    scale = max(np.median(statistic[reference]) / chi2.median(n_parameters), 1.0) if reference.sum() >= 3 else 1.0
    rejects = tested & (statistic / scale > chi2.isf(level, n_parameters))
    undecided = tested & ~rejects & (statistic / scale > chi2.isf(level, R * p))
    if undecided.any():
        located = located_loglik(np.flatnonzero(undecided))
        rejects |= undecided & (2.0 * (located - loglik) / scale > chi2.isf(level, R * p))
    return rejects
