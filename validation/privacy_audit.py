"""The privacy audit (issue 58): does each private mechanism release no more than the epsilon it claims?

For each mechanism, two neighbouring federations built to be told apart (``fedmm.privacy.audit``): a canary client
whose rows pull against the other clients' (each client private), or a canary row that lands in one component or
the other (each row private); many fits of each with fresh noise; the best linear test between their releases
(every round's shared components, proportions and log-variances), learnt on half the fits and measured on the
other half; its distance ``mu`` (Gaussian differential privacy) with a 99% lower confidence bound, and the epsilon
at delta it implies, beside the claim (``sqrt(rounds) / noise_multiplier_``, and the fit's ``privacy_spent_``).

| mechanism | design |
|---|---|
| each client, central, FedEM / FedGrEM | 10 clients of 120 rows in one dimension, 9 from N(-5, 4^2), the canary from N(+5, 4^2) or N(-5, 4^2); one component, ``bounds=(-7, 7)``, one round |
| each client, local, FedEM | the canary client alone, ``clip=0.1`` (its noise inside the box) |
| each row, central / local, FedEM | 2 clients (local: 1) of 3,000 rows in 20 dimensions from N(-0.5 1, 2^2 I) and N(+0.5 1, 2^2 I); the canary row of client 0 at the corner +7 1 or -7 1 of ``bounds=(-7, 7)``; two spherical components started at -0.5 1 and +0.5 1, three rounds at epsilon 20; the test reads the releases along 1 |

Each is run as fedmm computes its noise now, and (``--before``) with the calibration it had before issue 58
(client-level noise for half the diameter of the clip's ball, row-level noise for one row added or removed), which
the audit must flag. The row canary lies inside the box (every client clips its rows into it), at a corner whose
whitened deviation reaches the rows' radius from the first round on: in one dimension no row inside the box can
(the start's variances are the box's), so the canary needs many features. Beside them, the issue's black-box shift: the released mean of the 10 clients against the 9
without the canary, in the release's own noise standard deviations, against ``1 / noise_multiplier_``.

Target: every mechanism's audited ``mu`` lower bound at most its claim (ratio <= 1); the shift at most ``1 /
noise_multiplier_`` plus two of its standard errors; with ``--before``, the audit flags the client-level central
mechanism and both row-level ones (ratio > 1). Exits non-zero when one is missed.

    python validation/privacy_audit.py [--quick] [--runs N] [--before]
"""

import argparse
import contextlib
import sys
import warnings

import numpy as np

import fedmm.privacy.accounting as accounting
from fedmm import FederatedGaussianMixture
from fedmm.privacy import DifferentialPrivacy
from fedmm.privacy.audit import audit_estimator, canary_clients, canary_rows, release_along, release_vector

DELTA = 1e-6
#: epsilon of each audit: the claimed ``mu`` (1.45 each client, one round; 3.1 each row, three rounds) large enough
#: for a calibration that covers half (each client) or 1 / 1.5 (each row: 1 of the 1.52 of
#: :func:`fedmm.privacy.row_sensitivity`) of the sensitivity to show beyond the audit's confidence in 300 fits, and
#: the noise small enough for the release to stay inside the box. Each row: the first round's variances are the
#: box's, whose noise floor hides part of the canary's squares; three rounds at epsilon 20 flagged the old
#: calibration at 1.17 / 1.21 in 300 fits, two at epsilon 10 at 1.02 / 1.20.
EPSILON = {"client": 8.0, "sample": 20.0}
ROUNDS = {"client": 1, "sample": 3}
#: The audit's one-sided confidence: a mechanism exactly as noisy as claimed (the canary client's is) is flagged
#: one time in a hundred.
CONFIDENCE = 0.99
BOX = {"client": (-7.0, 7.0), "sample": (-7.0, 7.0)}
CLIP = {"central": 1.0, "local": 0.1}
#: The row canary's features (:func:`fedmm.privacy.audit.canary_rows`): from 10 on a corner of the box lies beyond
#: the rows' radius from the start.
ROW_FEATURES = 20


@contextlib.contextmanager
def before_issue_58():
    """fedmm's calibration before issue 58: client-level central noise ``sigma clip max_k s_k`` (one client
    added or removed with the denominator fixed, which it was not), row-level noise for one row added or removed
    (sensitivity 1)."""
    release_sd, row_sensitivity = accounting.release_sd, accounting.row_sensitivity
    accounting.release_sd = lambda sigma, share, noise: release_sd(sigma, share, noise) / (2.0 if noise == "central"
                                                                                            else 1.0)
    accounting.row_sensitivity = lambda family: 1.0
    try:
        yield
    finally:
        accounting.release_sd, accounting.row_sensitivity = release_sd, row_sensitivity


def mechanisms(quick):
    """(label, estimator, federation_a, federation_b, statistic) of every audited mechanism."""
    clients_a, clients_b = canary_clients(random_state=0)
    rows_a, rows_b = canary_rows(n_clients=2, n_features=ROW_FEATURES, random_state=0)
    row_a, row_b = canary_rows(n_clients=1, n_features=ROW_FEATURES, random_state=0)
    ones = np.ones(ROW_FEATURES)

    def client(method, noise):
        # Under local noise one client's noise is the whole release's: a small clip keeps it inside the box,
        # whose edges would otherwise hide the canary (post-processing the audit cannot see through).
        return FederatedGaussianMixture(1, method=method, privacy=DifferentialPrivacy(
            EPSILON["client"], DELTA, bounds=BOX["client"], rounds=ROUNDS["client"], noise=noise, clip=CLIP[noise]))

    def sample(noise):
        return FederatedGaussianMixture(2, method="fedem", covariance_type="spherical",
                                        means_init=np.outer([-1.0, 1.0], 0.5 * ones), privacy=DifferentialPrivacy(
            EPSILON["sample"], DELTA, bounds=BOX["sample"], rounds=ROUNDS["sample"], noise=noise, unit="sample"))
    along = release_along(ones / np.sqrt(ROW_FEATURES))
    out = [("each client, central, FedEM", client("fedem", "central"), clients_a, clients_b, release_vector),
           ("each client, local, FedEM", client("fedem", "local"), clients_a[-1:], clients_b[-1:], release_vector),
           ("each row, central, FedEM", sample("central"), rows_a, rows_b, along),
           ("each row, local, FedEM", sample("local"), row_a, row_b, along)]
    if not quick:
        out.insert(1, ("each client, central, FedGrEM", client("fedgrem", "central"), clients_a, clients_b,
                       release_vector))
    return out


def black_box_shift(runs):
    """The issue's black-box test: the released mean of the 10 clients (the canary from N(+5, 4^2)) against the 9
    without it, FedEM, one round; ``(shift in the 10 clients' noise sd, its standard error, 1 / sigma)``."""
    ten, _ = canary_clients(random_state=0)
    means = []
    for federation, offset in ((ten, 0), (ten[:-1], runs)):
        fits = [FederatedGaussianMixture(1, method="fedem", random_state=offset + seed, privacy=DifferentialPrivacy(
            8.0, DELTA, bounds=(-7.0, 7.0), rounds=1)).fit(federation) for seed in range(runs)]
        means.append(np.array([fit.means_[0, 0, 0] for fit in fits]))
    sd = means[0].std(ddof=1)
    shift = (means[0].mean() - means[1].mean()) / sd
    se = np.sqrt((1.0 + (means[1].std(ddof=1) / sd) ** 2) / runs + shift ** 2 / (2 * runs))
    return float(shift), float(se), 1.0 / fits[0].noise_multiplier_


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, FedGrEM left out (CI)")
    parser.add_argument("--runs", type=int, default=None, help="fits of each federation (default 1000, quick 300)")
    parser.add_argument("--before", action="store_true", help="also audit the calibration before issue 58")
    args = parser.parse_args(argv)
    runs = args.runs or (300 if args.quick else 1000)
    calibrations = [("now", contextlib.nullcontext)] + ([("before", before_issue_58)] if args.before else [])
    failed = []
    print(f"{runs} fits of each federation; mu: the best test's distance (99% lower bound), claimed "
          "sqrt(rounds) / noise_multiplier_; epsilon at delta 1e-6 from mu (GDP) and from the threshold test")
    print("| calibration | mechanism | mu | mu lower | mu claimed | ratio | epsilon audited (GDP / threshold) | "
          "epsilon claimed (GDP / RDP) |")
    print("|---|---|---|---|---|---|---|---|")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, calibration in calibrations:
            for label, estimator, a, b, statistic in mechanisms(args.quick):
                with calibration():
                    result = audit_estimator(estimator, a, b, runs, statistic=statistic, confidence=CONFIDENCE)
                    spent = estimator.set_params(random_state=0).fit(a).privacy_spent_[0]
                print(f"| {name} | {label} | {result.mu:.3f} | {result.mu_lower:.3f} | {result.mu_claimed:.3f} | "
                      f"{result.ratio:.2f} | {result.epsilon_lower:.2f} / {result.epsilon_threshold:.2f} | "
                      f"{result.epsilon_claimed:.2f} / {spent:.2f} |", flush=True)
                flagged = not result.passed
                expected = name == "before" and label != "each client, local, FedEM"
                if flagged != expected:
                    failed.append(f"{name}: {label}: ratio {result.ratio:.2f}")
        shift, se, allowed = black_box_shift(runs)
    print(f"\nblack box: the released mean moves by {shift:.2f} +- {se:.2f} of its noise sd between the 10 clients "
          f"and the 9; 1 / noise_multiplier_ allows {allowed:.2f}")
    if shift > allowed + 2 * se:
        failed.append(f"black-box shift {shift:.2f} > {allowed:.2f} + 2 x {se:.2f}")
    if failed:
        print("\nMISSED: " + "; ".join(failed))
        return 1
    print("\nevery target met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
