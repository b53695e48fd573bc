"""Full and tied covariances on real data: every method against scikit-learn, and the k-means start's metric.

fedmm fits in standard units (``docs/units.md``). For full and tied covariances those units are each
feature's pooled mean and standard deviation, as for diagonal ones, not a whitening by the pooled
covariance: the likelihood would allow the whitening, but the k-means start then sees every direction,
the one that separates the clusters too, with unit total variance, and misses the clusters. This
study fits scikit-learn's data sets with 5 random clients and reports, for every method, the adjusted
Rand index against the true classes and the log-likelihood per sample (in the data's units), with
scikit-learn's ``GaussianMixture`` on the raw and on the standardized features for reference.
The check: fedmm's pooled EM reaches at least scikit-learn's log-likelihood on the standardized
features (from the same kind of start; pooled EM's per-client proportions can only add to it), less
0.01 nats per sample, in every replication.

    python validation/covariance_starts.py [--quick] [--reps N]
"""

import argparse
import sys
import warnings

import numpy as np
from sklearn.datasets import load_breast_cancer, load_iris, load_wine
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture
from sklearn.preprocessing import StandardScaler

from fedmm import FederatedGaussianMixture

DATA = {"breast cancer": (load_breast_cancer, 2), "wine": (load_wine, 3), "iris": (load_iris, 3)}
METHODS = ("pooled-em", "fedgrem", "fedem", "local-em")
N_CLIENTS = 5
TOLERANCE = 0.01  # nats per sample: ten times EM's stopping tolerance


def replicate(X, y, n_components, covariance_type, seed):
    """``{name: (ARI, log-likelihood per sample)}`` for every method and scikit-learn, one replication."""
    groups = np.random.RandomState(seed).randint(N_CLIENTS, size=len(y))
    scaler = StandardScaler().fit(X)
    Z, jacobian = scaler.transform(X), np.log(scaler.scale_).sum()
    out = {}
    for name, data, shift in (("scikit-learn", X, 0.0), ("scikit-learn, standardized", Z, jacobian)):
        sk = GaussianMixture(n_components, covariance_type=covariance_type, n_init=3, random_state=seed).fit(data)
        out[name] = adjusted_rand_score(y, sk.predict(data)), sk.score(data) - shift
    for method in METHODS:
        gm = FederatedGaussianMixture(n_components, method=method, covariance_type=covariance_type, n_init=3,
                                      random_state=seed).fit(X, groups=groups)
        out[method] = adjusted_rand_score(y, gm.predict(X, groups=groups)), gm.score(X, groups=groups)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the breast cancer data, full covariances, one replication")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    reps = 1 if args.quick else args.reps
    cases = [("breast cancer", "full")] if args.quick else [(d, c) for d in DATA for c in ("full", "tied")]
    warnings.simplefilter("ignore")
    names = ("scikit-learn", "scikit-learn, standardized") + METHODS
    print(f"ARI against the classes / log-likelihood per sample, mean over {reps} replication(s), "
          f"{N_CLIENTS} random clients\n")
    print("| data | covariance | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    failed = []
    for data, covariance_type in cases:
        load, n_components = DATA[data]
        X, y = load(return_X_y=True)
        rows = [replicate(X, y, n_components, covariance_type, seed) for seed in range(reps)]
        mean = {n: np.mean([row[n] for row in rows], axis=0) for n in names}
        print(f"| {data} | {covariance_type} | " + " | ".join(f"{mean[n][0]:.3f} / {mean[n][1]:.2f}" for n in names)
              + " |", flush=True)
        gaps = [row["pooled-em"][1] - row["scikit-learn, standardized"][1] for row in rows]
        if min(gaps) < -TOLERANCE:
            failed.append(f"{data}, {covariance_type}: pooled EM {min(gaps):.3f} nats per sample below scikit-learn")
    print("\n" + ("\n".join(f"FAILED: {f}" for f in failed) if failed else
                  "passed: fedmm's pooled EM reaches scikit-learn's optimum on the standardized features in every case"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
