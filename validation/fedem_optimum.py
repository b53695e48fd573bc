"""FedEM at the shared-components optimum (issue 59): FedEM against pooled EM and scikit-learn, seed by seed.

Clients share 5 components in R^10 and differ in their proportions, FedEM's model (Marfoq et al., NeurIPS
2021, Sec. 2.2): means ``3 N(0, I)`` with every pair at least 4 apart, clipped to [-5, 5]; identity
covariances; each client's proportions Dirichlet(1); rows clipped to [-7, 7]. Design A: 100 clients of 300
rows; B: 1,000 clients of 50 rows. The error is the mean over components of the distance between the
estimated and the true means, after the best matching (Hungarian).

Printed per seed: FedEM's defaults; the seed paper's FedEM as fedmm ran it before issue 59
(``FedEM(aggregation="samples")``, ``init="common"``); pooled EM (``method="pooled-em"``); scikit-learn's
``GaussianMixture(5, covariance_type="diag")`` on the pooled rows; and the diagnosis, each of the two changes
alone: FedEM's defaults from the paper's start (one client's start broadcast), and with the paper's average
from the default start (the clients' starts clustered by the server, as pooled EM's). The check: FedEM's defaults within
``TARGET`` times pooled EM's error on every seed of A and B.

    python validation/fedem_optimum.py [--quick] [--seeds N]
"""

import argparse
import sys
import time
import warnings

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.mixture import GaussianMixture

from fedmm import FederatedGaussianMixture
from fedmm.engine import DivergenceError
from fedmm.methods import FedEM

DESIGNS = {"A": (100, 300), "B": (1000, 50)}
N_COMPONENTS, N_FEATURES, SEPARATION = 5, 10, 4.0
TARGET = 1.2   # FedEM's error over pooled EM's, at most, on every seed
FITS = {
    "FedEM": dict(method="fedem"),
    "FedEM (paper)": dict(method=FedEM(aggregation="samples"), init="common"),
    "paper's start": dict(method="fedem", init="common"),
    "paper's average": dict(method=FedEM(aggregation="samples")),
    "pooled EM": dict(method="pooled-em"),
}


def make_shared_components(n_clients, n_samples, random_state):
    """Per-client rows (list of (n_samples, 10) arrays) and the true means (5, 10) of the design above."""
    rng = np.random.RandomState(random_state)
    while True:   # rejection: every pair of means at least SEPARATION apart
        means = np.clip(3.0 * rng.standard_normal((N_COMPONENTS, N_FEATURES)), -5.0, 5.0)
        gaps = np.linalg.norm(means[:, None] - means[None], axis=-1)[np.triu_indices(N_COMPONENTS, 1)]
        if gaps.min() >= SEPARATION:
            break
    X = []
    for _ in range(n_clients):
        labels = rng.choice(N_COMPONENTS, n_samples, p=rng.dirichlet(np.ones(N_COMPONENTS)))
        X.append(np.clip(means[labels] + rng.standard_normal((n_samples, N_FEATURES)), -7.0, 7.0))
    return X, means


def mean_error(estimate, means):
    """Mean distance between matched estimated and true means (the best matching, Hungarian)."""
    distance = np.linalg.norm(estimate[:, None] - means[None], axis=-1)
    rows, cols = linear_sum_assignment(distance)
    return distance[rows, cols].mean()


def replicate(design, seed):
    """``{name: (error, rounds, seconds)}`` for every fit on one seed of ``design``; ``inf`` where a run diverged."""
    X, means = make_shared_components(*DESIGNS[design], seed)
    out = {}
    for name, options in FITS.items():
        start = time.perf_counter()
        try:
            gm = FederatedGaussianMixture(N_COMPONENTS, random_state=seed, **options).fit(X)
            out[name] = mean_error(gm.center_, means), gm.n_iter_, time.perf_counter() - start
        except DivergenceError:
            out[name] = np.inf, 0, time.perf_counter() - start
    start = time.perf_counter()
    sk = GaussianMixture(N_COMPONENTS, covariance_type="diag", random_state=seed).fit(np.concatenate(X))
    out["scikit-learn"] = mean_error(sk.means_, means), sk.n_iter_, time.perf_counter() - start
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds of each design")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    seeds = range(2 if args.quick else args.seeds)
    warnings.simplefilter("ignore")
    names = tuple(FITS) + ("scikit-learn",)
    print("error of the means after matching (rounds); FedEM (paper): FedEM(aggregation='samples'), init='common';\n"
          "paper's start: FedEM's defaults but init='common'; paper's average: FedEM(aggregation='samples')")
    failed = []
    for design, (K, n) in DESIGNS.items():
        print(f"\n{design}: {K} clients x {n} rows")
        print("seed  " + "".join(f"{name:>20}" for name in names) + "   FedEM / pooled")
        errors = []
        for seed in seeds:
            out = replicate(design, seed)
            errors.append([out[name][0] for name in names])
            ratio = out["FedEM"][0] / out["pooled EM"][0]
            if not ratio <= TARGET:
                failed.append(f"{design} seed {seed}")
            print(f"{seed:>4}  " + "".join(f"{out[name][0]:>14.3f} ({out[name][1]:>3})" for name in names)
                  + f"   {ratio:.2f}")
        print("mean  " + "".join(f"{e:>20.3f}" for e in np.mean(errors, axis=0)))
    verdict = "PASS" if not failed else "FAIL on " + ", ".join(failed)
    print(f"\n{verdict}: FedEM's defaults within {TARGET}x pooled EM's error on every seed")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
