"""The grouped-design study (issue 43, item 3): every method's error relative to local EM's when clients form groups.

``fedmm.simulate.make_grouped_gmm``: groups of four clients, each group with its own component centres
(``spread * N(0, I)``, R = 3 in R^5, 60 samples per client), with and without one outlier client; groups in
{1, 2, 3, 4} (one group is the paper's model: one population) and spread in {0.5, 2, 6, 12}. Spherical
covariances. Per fit, the mean parameter error over the honest clients; per setting, its median over seeds,
divided by local EM's. Also each personalized method's worst client against its own local EM fit, beside an
oracle that no method can beat by much: EM pooled over each true group's honest clients, started from the truth
(the floor of the per-client target: where even it has clients above 1.5x, pooling alone puts them there).

Targets (issue 43, defaults): FedGrEM at most 1.1x local EM in every setting, and below it where spread is at
most 2 (groups of four clients pool); FedeRiCo: no client above 1.5x its local EM error. Exits non-zero
when a FedGrEM target is missed. Reported beside them: each method's worst client as issue 61 measures it, its
error averaged over seeds over its local EM's averaged over seeds (as ``every_client.py``).

    python validation/grouped.py [--quick] [--seeds N] [--figure PATH] [--jobs N] [--methods NAME ...]
"""

import argparse
import itertools
import sys
import warnings

import numpy as np
from joblib import Parallel, delayed

from fedmm import FederatedGaussianMixture
from fedmm.methods import DFedGrEM, FedGrEM
from fedmm.metrics import estimation_errors
from fedmm.simulate import make_grouped_gmm

METHODS = {"local EM": "local-em", "FedGrEM": "fedgrem", "FedGrEM, one centre": FedGrEM(n_centers=1),
           "FedEM": "fedem", "FedeRiCo": "federico", "dynamic graph": "dynamic-graph",
           "d-FedGrEM (ring)": DFedGrEM(graph="ring")}
#: The reference column: knows each client's group and the true centres (not a method).
ORACLE = "oracle (groups known)"
GROUPS, SPREADS = (1, 2, 3, 4), (0.5, 2.0, 6.0, 12.0)
QUICK = dict(groups=(1, 3), spreads=(2.0, 6.0))
#: The targets: FedGrEM's ratio to local EM everywhere, and where groups pool (spread at most 2).
AT_MOST, POOLING_SPREAD = 1.1, 2.0


def pooled_in_groups(X, truth, groups, seed):
    """The oracle's ``(weights, means)`` of the honest clients: FedEM (one set of means, each client's own
    proportions) on each true group's honest clients, started from that group's true centres and proportions."""
    fits = {}
    for g in np.unique(groups[groups >= 0]):
        members = np.flatnonzero(groups == g)
        fits[g] = FederatedGaussianMixture(3, covariance_type="spherical", method="fedem", random_state=seed,
                                           means_init=truth.centers[g], weights_init=truth.weights[members],
                                           ).fit([X[k] for k in members])
    honest = np.flatnonzero(groups >= 0)
    position = {k: i for g in fits for i, k in enumerate(np.flatnonzero(groups == g))}
    return (np.array([fits[groups[k]].weights_[position[k]] for k in honest]),
            np.array([fits[groups[k]].means_[position[k]] for k in honest]))


def one_fit(n_groups, spread, outlier, seed, names):
    """{method: (mean honest error, per-client errors)} for one data set, for the methods ``names`` and the
    oracle."""
    X, truth, groups = make_grouped_gmm(n_groups=n_groups, spread=spread, outlier=outlier, random_state=seed)
    honest = groups >= 0
    estimates = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            fit = FederatedGaussianMixture(3, covariance_type="spherical", random_state=seed,
                                           method=METHODS[name]).fit(X)
            estimates[name] = fit.weights_[honest], fit.means_[honest]
        estimates[ORACLE] = pooled_in_groups(X, truth, groups, seed)
    out = {}
    for name, (weights, means) in estimates.items():
        error = estimation_errors(weights, means, truth.weights[honest], truth.theta[honest])[1]
        out[name] = (float(error.mean()), error)
    return out


def run(groups, spreads, seeds, jobs, names):
    settings = list(itertools.product(groups, spreads, (True, False)))
    fits = Parallel(n_jobs=jobs)(delayed(one_fit)(g, s, o, seed, names) for g, s, o in settings for seed in seeds)
    return {setting: fits[i * len(seeds):(i + 1) * len(seeds)] for i, setting in enumerate(settings)}


def summary(results):
    """{setting: {method: (ratio of medians to local EM, every honest client's error over its own local EM
    error, all seeds, and each honest client's error averaged over seeds over its local EM's averaged over seeds:
    issue 61's per-client ratio, as ``every_client.py``'s)}}."""
    table = {}
    for setting, fits in results.items():
        local = np.median([f["local EM"][0] for f in fits])
        own = np.mean([f["local EM"][1] for f in fits], axis=0)
        table[setting] = {name: (np.median([f[name][0] for f in fits]) / local,
                                 np.concatenate([f[name][1] / f["local EM"][1] for f in fits]),
                                 np.mean([f[name][1] for f in fits], axis=0) / own)
                          for name in fits[0] if name != "local EM"}
        table[setting]["local EM"] = (local, None, None)
    return table


def figure(table, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = sorted({g for g, _, _ in table})
    spreads = sorted({s for _, s, _ in table})
    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.2), sharey=True)
    for ax, g in zip(np.atleast_1d(axes), groups):
        for name in (n for n in table[g, spreads[0], True] if n != "local EM"):
            ax.plot(spreads, [table[g, s, True][name][0] for s in spreads], marker="o", label=name)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log"), ax.set_yscale("log")
        ax.set_title(f"{g} group{'s' if g > 1 else ''} of 4 + outlier"), ax.set_xlabel("spread")
    np.atleast_1d(axes)[0].set_ylabel("error / local EM's")
    np.atleast_1d(axes)[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 seeds (the fewest whose median is not a mean), groups {1, 3}, spread {2, 6}")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--figure", default=None, help="write the figure there (needs matplotlib)")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS),
                        help="re-run these methods only (local EM always runs: it is the reference)")
    args = parser.parse_args(argv)
    names = ["local EM"] + [n for n in args.methods if n != "local EM"]
    seeds = range(args.seeds or (3 if args.quick else 20))
    groups, spreads = (QUICK["groups"], QUICK["spreads"]) if args.quick else (GROUPS, SPREADS)
    table = summary(run(groups, spreads, seeds, args.jobs, names))
    names = names[1:] + [ORACLE]
    print(f"Grouped design, {len(seeds)} seeds: median over seeds of the honest clients' mean error, over local "
          "EM's (local EM's own error in its column)\n")
    print("| groups | spread | outlier | local EM | " + " | ".join(names) + " |")
    print("|---|---|---|---|" + "---|" * len(names))
    for (g, s, o), row in table.items():
        print(f"| {g} | {s:g} | {'yes' if o else 'no'} | {row['local EM'][0]:.3f} | "
              + " | ".join(f"{row[n][0]:.2f}" for n in names) + " |")
    print("\nEach honest client's error over its own local EM error, pooled over groups, outlier and seeds: the "
          "share above 1.5 and the largest; then the largest of each client's ratio averaged over seeds (its error "
          "averaged over seeds over its local EM's, issue 61's per-client target)\n")
    print("| spread | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for spread in spreads:
        rows = [row for (g, s, o), row in table.items() if s == spread]
        ratios = {n: (np.concatenate([row[n][1] for row in rows]), np.concatenate([row[n][2] for row in rows]))
                  for n in names}
        print(f"| {spread:g} | " + " | ".join(f"{np.mean(r > 1.5):.1%}, {r.max():.1f}; {a.max():.2f}"
                                              for r, a in ratios.values()) + " |")
    checks = []
    if "FedGrEM" in names:
        worst = max(table, key=lambda setting: table[setting]["FedGrEM"][0])
        print(f"\nFedGrEM's worst setting: {worst[0]} group(s), spread {worst[1]:g}, outlier {worst[2]}")
        checks = [(f"FedGrEM at most {AT_MOST}x local EM in every setting (worst "
                   f"{max(row['FedGrEM'][0] for row in table.values()):.2f})",
                   all(row["FedGrEM"][0] <= AT_MOST for row in table.values())),
                  (f"FedGrEM below local EM where spread <= {POOLING_SPREAD:g} (worst "
                   f"{max(row['FedGrEM'][0] for (g, s, o), row in table.items() if s <= POOLING_SPREAD):.2f})",
                   all(row["FedGrEM"][0] < 1.0 for (g, s, o), row in table.items() if s <= POOLING_SPREAD))]
    print()
    for text, holds in checks:
        print(f"- {'holds' if holds else 'DOES NOT HOLD'}: {text}")
    floor = max(row[ORACLE][1].max() for row in table.values())
    if "FedeRiCo" in names:
        federico = max(row["FedeRiCo"][1].max() for row in table.values())
        print(f"- {'holds' if federico <= 1.5 else 'DOES NOT HOLD'} (reported, not checked): FedeRiCo's worst client "
              f"at most 1.5x its local EM error in every fit ({federico:.2f}; the oracle's worst: {floor:.2f})")
    else:
        print(f"- the oracle's worst client: {floor:.2f}x its local EM error")
    for name in ("FedGrEM", "FedeRiCo"):
        if name in names:
            averaged = max(row[name][2].max() for row in table.values())
            print(f"- {'holds' if averaged <= 1.5 else 'DOES NOT HOLD'} (reported, not checked): {name}'s worst "
                  f"client at most 1.5x its local EM error averaged over seeds ({averaged:.2f})")
    if args.figure:
        figure(table, args.figure)
    return 0 if all(holds for _, holds in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
