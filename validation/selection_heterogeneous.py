"""Model selection when clients differ (issue 43, item 5): does ``select_n_components``'s default find R?

The issue's design: six clients of 150 samples in R^5, R centres ``3 N(0, I)`` drawn until every pair is at
least 3.5 apart, Dirichlet(5) proportions, every client's means at distance ``h`` from the centres
(``make_federated_gmm(6, 150, centers=C, h=h)``); R in {2, 3, 5}, h in {0, 0.5}; FedGrEM with
``n_init=1``, grid 1..7. Criteria: the default (``"auto"``: for FedGrEM, ``"fewest"``, the fewer
components of BIC's and cross-validation's choices), cross-validation alone, BIC alone (with FedGrEM's
effective count, which falls as more components pool), and scikit-learn's BIC on the pooled rows as the
reference. Target: the default finds the true R in at least 9 of 10 seeds
in every case. Exits non-zero when it misses.

    python validation/selection_heterogeneous.py [--quick] [--seeds N] [--jobs N]
"""

import argparse
import itertools
import sys
import time
import warnings

import numpy as np
from joblib import Parallel, delayed
from sklearn.mixture import GaussianMixture

from fedmm import FederatedGaussianMixture
from fedmm.selection import select_n_components
from fedmm.simulate import make_federated_gmm

GRID = range(1, 8)
CASES = list(itertools.product((2, 3, 5), (0.0, 0.5)))
TARGET = 9          # of 10 seeds


def centers(R, seed, separation=3.5):
    """R centres ``3 N(0, I_5)``, redrawn until every pair is at least ``separation`` apart."""
    rng = np.random.RandomState(seed)
    while True:
        C = 3.0 * rng.standard_normal((R, 5))
        if R == 1 or min(np.linalg.norm(a - b) for a, b in itertools.combinations(C, 2)) >= separation:
            return C


def chosen(R, h, seed, criteria):
    """{criterion: the number of components chosen} on one data set."""
    X, _ = make_federated_gmm(6, 150, centers=centers(R, seed), h=h, random_state=seed)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for criterion in criteria:
            if criterion == "scikit-learn BIC (pooled)":
                rows = np.concatenate(X)
                out[criterion] = GRID[int(np.argmin([GaussianMixture(r, random_state=seed).fit(rows).bic(rows)
                                                     for r in GRID]))]
                continue
            selection = select_n_components(FederatedGaussianMixture(n_init=1, random_state=seed), X,
                                            n_components=GRID, criterion=criterion, random_state=seed)
            out[criterion] = selection.best_params["n_components"]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, R = 3 at h = 0.5, the default only (CI)")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=-1)
    args = parser.parse_args(argv)
    seeds = range(args.seeds or (2 if args.quick else 10))
    cases = [(3, 0.5)] if args.quick else CASES
    criteria = ["auto"] if args.quick else ["auto", "cv", "bic", "scikit-learn BIC (pooled)"]
    began = time.time()
    jobs = [(R, h, seed) for R, h in cases for seed in seeds]
    picks = Parallel(n_jobs=args.jobs)(delayed(chosen)(R, h, seed, criteria) for R, h, seed in jobs)
    print(f"Components chosen on six heterogeneous clients ({len(seeds)} seeds; grid "
          f"{GRID.start}..{GRID.stop - 1}): seeds finding the true R, and the choices\n")
    print("| R | h | " + " | ".join(criteria) + " |\n|---|---|" + "---|" * len(criteria))
    checks = []
    for R, h in cases:
        found = [p for (r, hh, _), p in zip(jobs, picks) if (r, hh) == (R, h)]
        cells = []
        for criterion in criteria:
            Rs = [f[criterion] for f in found]
            counts = ", ".join(f"{r}: {n}" for r, n in zip(*np.unique(Rs, return_counts=True)))
            cells.append(f"{sum(r == R for r in Rs)}/{len(Rs)} ({counts})")
        print(f"| {R} | {h:g} | " + " | ".join(cells) + " |")
        hits = sum(f["auto"] == R for f in found)
        checks.append((f"R = {R}, h = {h:g}: the default finds R in {hits} of {len(found)} seeds",
                       hits >= TARGET * len(found) / 10))
    print("\n" + "\n".join(f"- {'met' if ok else 'MISSED'}: {text}" for text, ok in checks))
    print(f"\n{time.time() - began:.0f} s")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
