"""An outsider's check of a private fit: how well the releases of two neighbouring federations can be told apart,
as an epsilon, beside the epsilon the fit claims (``docs/privacy.md``, "Checking the promise").

A differentially private fit promises that no test, however clever, tells two neighbouring federations apart
from what the fit releases better than ``(epsilon, delta)`` allows. An audit turns that around (Jagielski,
Ullman & Oprea, NeurIPS 2020; Nasr et al., IEEE S&P 2021): build neighbours on purpose to be told apart (a
canary client whose rows pull against everyone else's, or a canary row in another component), fit each many
times with fresh noise, and find the best test. What the test achieves is a lower bound on the epsilon any
correct implementation can claim; above the claim, the implementation is wrong.

- **the test**: every fit's releases (:attr:`releases_`, every round's shared components, proportions and
  log-variances) are one vector; on one half of the fits the best linear test between the two federations is
  Fisher's discriminant (the likelihood-ratio test for Gaussian noise of equal spread); on the other half its
  statistic's two samples give the distance ``mu`` between them in their own standard deviations, and the halves
  swap (cross-fitting), so that every fit is tested by a direction it did not help learn;
- **Gaussian differential privacy**: a Gaussian mechanism of sensitivity ``S`` and noise ``sigma S`` is exactly
  ``(1 / sigma)``-GDP, and ``T`` rounds compose to ``sqrt(T) / sigma`` (Dong, Roth & Su, JRSS B 2022, Cor. 3.3),
  so the fit claims ``mu <= sqrt(T) / sigma`` (:func:`claimed_mu`); the audit's lower confidence bound on
  ``mu`` must not exceed it. ``mu`` is converted to the epsilon it implies at ``delta`` (:func:`gdp_epsilon`,
  their Cor. 2.13), so that audited and claimed epsilons stand side by side; with Gaussian noise this is the
  tight audit of Nasr et al. (USENIX Security 2023), which fits the Gaussian trade-off curve;
- **no assumption**: beside it, the held-out error rates of the best threshold on the statistic, with
  Clopper-Pearson bounds, give an epsilon lower bound that assumes nothing of the noise's shape (Jagielski et
  al. 2020), weaker (it needs many fits to certify a large epsilon).

An audit can only flag: passing it is no proof. The linear test sees a shift of the releases' mean, not a change
of their spread (two federations whose releases differ only in variance pass), and with many release coordinates
and few fits its direction is mostly noise (it warns below :data:`RUNS_PER_COORDINATE` fits per coordinate).
Canaries built for the mechanism, with a statistic of few coordinates, are what make it sharp.
"""

import warnings
from typing import NamedTuple

import numpy as np
from scipy import optimize, stats
from sklearn.base import clone

__all__ = ["AuditResult", "gdp_epsilon", "claimed_mu", "audit_releases", "release_vector", "release_along",
           "audit_estimator", "canary_clients", "canary_rows"]

#: The one-sided confidence of the audit's bounds.
CONFIDENCE = 0.95
#: The fits of each federation per release coordinate below which an audit warns that it has little power: an
#: outside audit found a release at twice the claim passing 98% of the time with 60 coordinates and 50 fits, and
#: caught at 1,000.
RUNS_PER_COORDINATE = 10


class AuditResult(NamedTuple):
    """What an audit found (:func:`audit_releases`).

    Attributes
    ----------
    mu : float
        The distance between the two federations' test statistics in their standard deviation: the Gaussian
        differential privacy the releases show.
    mu_lower : float
        Its lower confidence bound (:data:`CONFIDENCE`).
    mu_claimed : float
        What the calibration allows (:func:`claimed_mu`).
    epsilon_lower : float
        The epsilon at ``delta`` that ``mu_lower`` implies (:func:`gdp_epsilon`): the audited lower bound.
    epsilon_claimed : float
        The epsilon at ``delta`` that ``mu_claimed`` implies: the tight value for the calibrated noise (the
        fit's ``privacy_spent_``, by Rényi DP's accounting, is a little above it).
    epsilon_threshold : float
        The lower bound of the best threshold test's held-out error rates (Clopper-Pearson), no assumption on
        the noise.
    n_runs : int
        Fits of each federation.
    """

    mu: float
    mu_lower: float
    mu_claimed: float
    epsilon_lower: float
    epsilon_claimed: float
    epsilon_threshold: float
    n_runs: int

    @property
    def ratio(self):
        """Audited over claimed, ``mu_lower / mu_claimed``: above 1 the implementation releases more than it
        claims, beyond the audit's confidence."""
        return self.mu_lower / self.mu_claimed

    @property
    def passed(self):
        return bool(self.ratio <= 1.0)


def gdp_epsilon(mu, delta):
    """The smallest ``epsilon`` with ``mu``-Gaussian differential privacy implying ``(epsilon, delta)``-DP:
    the root of ``delta = Phi(-epsilon / mu + mu / 2) - e^epsilon Phi(-epsilon / mu - mu / 2)`` (Dong, Roth &
    Su 2022, Cor. 2.13); 0 where ``mu`` gives ``delta`` at ``epsilon = 0`` already."""
    if mu <= 0:
        return 0.0

    def excess(eps):
        return (stats.norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)) - delta
    if excess(0.0) <= 0:
        return 0.0
    high = 1.0
    while excess(high) > 0:
        high *= 2.0
    return float(optimize.brentq(excess, 0.0, high, xtol=1e-10))


def claimed_mu(noise_multiplier, rounds):
    """The Gaussian differential privacy ``rounds`` releases claim with noise ``noise_multiplier`` times their
    sensitivity: ``sqrt(rounds) / noise_multiplier`` (Dong, Roth & Su 2022, Cor. 3.3)."""
    return float(np.sqrt(rounds) / noise_multiplier)


def _fisher_direction(a, b):
    """Fisher's discriminant between the rows of ``a`` and of ``b``: the pooled covariance (a little ridge for
    coordinates that do not move) solved against the difference of their means."""
    pooled = 0.5 * (np.cov(a, rowvar=False, ddof=1).reshape(a.shape[1], -1)
                    + np.cov(b, rowvar=False, ddof=1).reshape(a.shape[1], -1))
    ridge = 1e-9 * max(np.trace(pooled) / len(pooled), np.finfo(float).tiny)
    return np.linalg.solve(pooled + ridge * np.eye(len(pooled)), a.mean(axis=0) - b.mean(axis=0))


def _threshold_epsilon(train_a, train_b, test_a, test_b, delta, confidence):
    """The held-out lower bound on epsilon of the threshold between the statistics ``train_*`` that separates
    them best, with Clopper-Pearson bounds on its error rates on ``test_*`` (Jagielski et al. 2020, Alg. 2)."""
    candidates = np.unique(np.concatenate([train_a, train_b]))
    false_neg = np.searchsorted(np.sort(train_a), candidates, side="left") / len(train_a)
    false_pos = 1.0 - np.searchsorted(np.sort(train_b), candidates, side="left") / len(train_b)
    best = candidates[np.argmax(1.0 - false_neg - false_pos)]
    k_fn, k_fp, n_a, n_b = int(np.sum(test_a < best)), int(np.sum(test_b >= best)), len(test_a), len(test_b)
    alpha = 1.0 - confidence
    # Upper Clopper-Pearson bounds of the two error rates (each at alpha / 2: both hold together).
    fn = stats.beta.ppf(1 - alpha / 2, k_fn + 1, n_a - k_fn) if k_fn < n_a else 1.0
    fp = stats.beta.ppf(1 - alpha / 2, k_fp + 1, n_b - k_fp) if k_fp < n_b else 1.0
    bounds = [np.log(max(1.0 - delta - x, 1e-300) / y) for x, y in ((fn, fp), (fp, fn)) if y > 0]
    return float(max(0.0, *bounds))


def _cross_fitted(a, b):
    """The statistics of Fisher's discriminant on ``a`` and ``b`` (runs, m), each half's from the direction learnt
    on the other half (two-fold cross-fitting: every run is tested, none by a direction it helped learn), less the
    training half's midpoint, in the standard deviation of their half: ``(statistics of a, statistics of b)``."""
    halves_a, halves_b = np.array_split(np.arange(len(a)), 2), np.array_split(np.arange(len(b)), 2)
    out_a, out_b = [], []
    for test, train in ((0, 1), (1, 0)):
        train_a, train_b = a[halves_a[train]], b[halves_b[train]]
        direction = _fisher_direction(train_a, train_b)
        middle = 0.5 * (train_a.mean(axis=0) + train_b.mean(axis=0)) @ direction   # 0 between the two: a threshold
        ta, tb = a[halves_a[test]] @ direction - middle, b[halves_b[test]] @ direction - middle
        spread = np.sqrt(((len(ta) - 1) * ta.var(ddof=1) + (len(tb) - 1) * tb.var(ddof=1)) / (len(ta) + len(tb) - 2))
        spread = spread if spread > 0 else np.finfo(float).tiny
        out_a.append(ta / spread)
        out_b.append(tb / spread)
    return np.concatenate(out_a), np.concatenate(out_b)


def audit_releases(a, b, mu_claimed, delta, confidence=CONFIDENCE):
    """Audit the releases ``a`` (runs, m) of one federation against ``b`` (runs, m) of its neighbour, fits with
    independent noise (see the module docstring): the best linear test learnt on one half of the runs and measured
    on the other, both ways. Returns an :class:`AuditResult`."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    if len(a) < 8 or len(b) < 8:
        raise ValueError(f"An audit needs at least 8 fits of each federation; got {len(a)} and {len(b)}.")
    if min(len(a), len(b)) < RUNS_PER_COORDINATE * a.shape[1]:
        # Fisher's direction learnt on few runs in many coordinates is mostly noise: a pass then says little.
        warnings.warn(f"An audit of {a.shape[1]} release coordinates on {min(len(a), len(b))} fits of each federation "
                      f"has little power (a release twice as distinguishable as claimed can pass); use "
                      f"{RUNS_PER_COORDINATE * a.shape[1]} fits or more, or a statistic of fewer coordinates.",
                      UserWarning, stacklevel=2)
    stat_a, stat_b = _cross_fitted(a, b)
    n_a, n_b = len(stat_a), len(stat_b)
    mu = float(stat_a.mean() - stat_b.mean())
    # The standardized difference's standard error (Hedges & Olkin 1985, eq. 5.15).
    se = np.sqrt(1.0 / n_a + 1.0 / n_b + mu ** 2 / (2.0 * (n_a + n_b)))
    mu_lower = max(float(mu - stats.norm.ppf(confidence) * se), 0.0)
    half_a, half_b = n_a // 2, n_b // 2
    threshold = _threshold_epsilon(stat_a[:half_a], stat_b[:half_b], stat_a[half_a:], stat_b[half_b:], delta,
                                   confidence)
    return AuditResult(mu, mu_lower, float(mu_claimed), gdp_epsilon(mu_lower, delta), gdp_epsilon(mu_claimed, delta),
                       threshold, min(len(a), len(b)))


def release_vector(estimator):
    """A fitted private estimator's releases (:attr:`releases_`) as one vector: every round's proportions,
    components and variances (log-variances where they are all positive), each round's components in the
    order of their first coordinate (so that a fit that labels them otherwise reads the same)."""
    return _releases(estimator)


def release_along(direction):
    """A statistic (for :func:`audit_estimator`) of few coordinates: :func:`release_vector` with the components
    along ``direction`` (p,) only, ordered by that coordinate. A canary that moves the components along one
    direction (:func:`canary_rows`) shows there whole, without the other coordinates' noise in the test's
    direction (post-processing: a lower bound still)."""
    direction = np.asarray(direction, dtype=float)[:, None]
    return lambda estimator: _releases(estimator, direction)


def _releases(estimator, direction=None):
    """Every round's proportions, components (along ``direction`` (p, 1) where given) and (log-)variances."""
    parts = []
    for release in estimator.releases_:
        theta = release.theta[0] if direction is None else release.theta[0] @ direction
        order = np.argsort(theta[:, 0], kind="stable")
        scale = release.scale[0, order]
        parts += [release.weights[0, order], theta[order].ravel(),
                  (np.log(scale) if np.all(scale > 0) else scale).ravel()]
    return np.concatenate(parts)


def audit_estimator(estimator, federation_a, federation_b, n_runs, statistic=release_vector, seed=0,
                    confidence=CONFIDENCE):
    """Fit ``estimator`` (an unfitted private fedmm estimator, cloned for every fit) ``n_runs`` times on each of
    two neighbouring federations, with a fresh ``random_state`` each time (the noise independent between all
    fits), and audit their releases (:func:`audit_releases`).

    ``federation_a`` and ``federation_b`` are the ``fit`` arguments: a list of client arrays, or a tuple of
    positional arguments (``(X_clients, y_clients)`` for regressions). ``statistic`` maps a fitted estimator to
    the vector the test reads (default :func:`release_vector`). The claim is the first fit's
    (:func:`claimed_mu` of its ``noise_multiplier_`` over its releases), ``delta`` its privacy's."""
    releases, claim = ([], []), None
    for side, federation in enumerate((federation_a, federation_b)):
        args = federation if isinstance(federation, tuple) else (federation,)
        for run in range(n_runs):
            fitted = clone(estimator).set_params(random_state=seed + 2 * run + side).fit(*args)
            releases[side].append(statistic(fitted))
            claim = claim or (fitted.noise_multiplier_, len(fitted.releases_), fitted.privacy_spent_[1])
    sigma, rounds, delta = claim
    return audit_releases(releases[0], releases[1], claimed_mu(sigma, rounds), delta, confidence)


def canary_clients(n_clients=10, n_samples=120, spread=4.0, far=5.0, random_state=None):
    """Two neighbouring federations of one feature (the issue's worst case for client-level privacy): ``n_clients
    - 1`` clients whose rows, from ``N(-far, spread^2)``, pull one way, and a canary client whose rows pull the
    other way (``N(far, spread^2)``) in one federation and the same way in the other. Fit with one component
    and ``bounds=(-far - 2, far + 2)``: every client's update is at the clip, the canary's at opposite ends of
    the ball, so the shares' average moves by the whole sensitivity. Returns ``(federation_a, federation_b)``."""
    rng = np.random.RandomState(random_state)
    others = [rng.normal(-far, spread, (n_samples, 1)) for _ in range(n_clients - 1)]
    canary = rng.normal(0.0, spread, (n_samples, 1))
    return others + [canary + far], others + [canary - far]


def canary_rows(n_clients=2, n_samples=3000, n_features=20, offset=0.5, spread=2.0, edge=7.0, random_state=None):
    """Two neighbouring federations that differ in one row (the worst case for privacy of each row): clients of
    ``n_features`` features whose rows come from two components at ``-offset`` and ``+offset`` times the vector of
    ones, with standard deviation ``spread``, and a canary row of the first client at the corner ``+edge`` of the
    box (in the second component) in one federation and at ``-edge`` (in the first) in the other, so that its
    sums land in different components: ``sqrt(2)`` of :func:`~fedmm.privacy.row_sensitivity` in the scaled sums.

    Fit with two spherical components started at the centres (``means_init``), ``bounds=(-edge, edge)`` and
    the statistic :func:`release_along` the vector of ones. The row lies inside the box (every client clips its
    rows into it first), yet its whitened deviation reaches the rows' radius from the first round on (many
    features: the corner lies ``sqrt(3 n_features)`` of the start's standard deviations from the centre, above
    the radius ``sqrt(chi2_0.999(n_features))`` from 10 features on); many rows keep the variances' noise, and so
    the release's floor, well below the components' spread, so that every field of the sums carries the canary.
    Returns ``(federation_a, federation_b)``."""
    rng = np.random.RandomState(random_state)
    half = n_samples // 2
    clients = [np.concatenate([rng.normal(c, spread, (half, n_features)) for c in (-offset, offset)])
               for _ in range(n_clients)]
    a, b = [c.copy() for c in clients], [c.copy() for c in clients]
    a[0][0], b[0][0] = edge, -edge
    return a, b
