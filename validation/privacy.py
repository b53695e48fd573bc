"""What differential privacy costs (issue 46, item 4, FedEM's part): the error against epsilon.

The paper's GMM design scaled to many clients, ``make_federated_gmm(100, 300)`` (K = 100 clients of 300 rows,
R = 5 in R^10), ``bounds=(-7, 7)``, client-level delta = 1e-6; FedEM with
``privacy=DifferentialPrivacy(epsilon, ...)`` at its defaults (clip 1, 40 rounds) against the plain FedEM
with its defaults on the same data.
Per epsilon: the median over seeds of the largest error over clients (``docs/privacy.md``).

Target (issue 46): at epsilon = 4, FedEM with DP within 3x the plain FedEM's largest error (medians over
seeds). Exits non-zero when it is missed.

    python validation/privacy.py [--quick] [--seeds N] [--figure PATH] [--jobs N]
"""

import argparse
import sys
import warnings

import numpy as np
from joblib import Parallel, delayed

from fedmm import FederatedGaussianMixture
from fedmm.metrics import estimation_errors
from fedmm.privacy import DifferentialPrivacy
from fedmm.simulate import make_federated_gmm

EPSILONS = (1.0, 2.0, 4.0, 8.0, 16.0, None)   # None: no privacy
QUICK_EPSILONS = (4.0, None)
BOUNDS, DELTA = (-7.0, 7.0), 1e-6
#: The target: the private error at epsilon = 4 over the plain one, medians over seeds.
TARGET_EPSILON, AT_MOST = 4.0, 3.0


def one_seed(seed, epsilons):
    """{epsilon: largest error over clients} for one data set (None: the plain FedEM with its defaults)."""
    X, truth = make_federated_gmm(n_clients=100, n_samples=300, random_state=seed)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epsilon in epsilons:
            privacy = None if epsilon is None else DifferentialPrivacy(epsilon, DELTA, bounds=BOUNDS)
            fit = FederatedGaussianMixture(5, method="fedem", random_state=seed, privacy=privacy).fit(X)
            out[epsilon] = float(estimation_errors(fit.weights_, fit.means_, truth.weights, truth.theta)[1].max())
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="epsilon 4 and no privacy, 2 seeds")
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default 10; 2 with --quick)")
    parser.add_argument("--figure", default=None, help="write the error against epsilon here (PNG)")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    epsilons = QUICK_EPSILONS if args.quick else EPSILONS
    seeds = range(args.seeds or (2 if args.quick else 10))
    fits = Parallel(n_jobs=args.jobs)(delayed(one_seed)(seed, epsilons) for seed in seeds)
    errors = {eps: np.array([f[eps] for f in fits]) for eps in epsilons}
    print(f"FedEM, K = 100 clients of 300 rows, bounds {BOUNDS}, {DifferentialPrivacy().rounds} rounds, "
          f"delta {DELTA:g}, {len(seeds)} seeds: largest error over clients\n")
    print("| epsilon | median | range |\n|---|---|---|")
    for eps in epsilons:
        e = errors[eps]
        print(f"| {'no privacy' if eps is None else f'{eps:g}'} | {np.median(e):.3f} | {e.min():.3f}-{e.max():.3f} |")
    ratio = np.median(errors[TARGET_EPSILON]) / np.median(errors[None])
    met = ratio <= AT_MOST
    print(f"\nepsilon = {TARGET_EPSILON:g}: {ratio:.2f}x the plain FedEM's median error (target at most "
          f"{AT_MOST:g}x): {'met' if met else 'MISSED'}")
    if args.figure:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        private = [eps for eps in epsilons if eps is not None]
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(private, [np.median(errors[eps]) for eps in private], "o-", label="FedEM with DP (median)")
        ax.axhline(np.median(errors[None]), color="k", ls="--", label="FedEM, no privacy")
        ax.set(xscale="log", yscale="log", xlabel="epsilon (client level, delta 1e-6)",
               ylabel="largest error over clients", title="K = 100 clients of 300 rows")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.figure, dpi=120)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
