"""Decentralized and personalized methods against FedGrEM, FedEM and local EM (issue 14).

Three parts, printed as markdown:

1. **D-FedEM reaches FedEM.** The FedGrEM paper's GMM design (App. B.1, K = 10, h = 0.5) from one
   common start: the largest difference between D-FedEM's and FedEM's fitted means after 60 rounds,
   as exchanges per round grow, on a ring, a 2 x 5 torus and the complete graph (fastest-mixing
   weights); and the estimation error against rounds on the ring and the complete graph with one
   exchange.
2. **The clustered design** (``fedmm.simulate.make_grouped_gmm``: three groups of four clients, each
   group with its own component means spread 6, 60 samples in R^5, one outlier client): the mean
   parameter error of each group's clients, median over seeds, for every method; FedeRiCo's weight
   on the client's own group; the dynamic graph's links across groups.
3. **The FedGrEM paper's GMM design** at h = 0 and h = 1 with one outlier client (client 9): the
   paper's error (maximum over honest clients) and the floats each fit sent, for every method.
4. **Real data that ships offline**: palmerpenguins (four measurements, clients = the three islands,
   full covariances) and standardized wine (five random clients, diagonal covariances), R = 3: the
   adjusted Rand index of each client's predictions against the species / cultivars, averaged over
   the clients with more than one class.

Then the seed papers' claims this setting can test, each marked holds / does not hold. Exits
non-zero when a check of part 1 or 2 fails.

    python validation/decentralized.py [--quick] [--seeds N] [--figure PATH]

``--figure`` draws FedeRiCo's collaborator weights on the clustered design (seed 0) and D-FedEM's
distance to FedEM against the exchanges per round (``docs/img/decentralized.png``).
"""

import argparse
import sys
import time
import warnings

import numpy as np
from joblib import Parallel, delayed
from sklearn.exceptions import ConvergenceWarning

from fedmm import FederatedGaussianMixture
from fedmm.methods import METHODS, gather_options
from fedmm.data import FederatedData
from fedmm.engine import run
from fedmm.families import GaussianFamily, MixtureParams
from fedmm.metrics import estimation_errors
from fedmm.simulate import make_federated_gmm, make_grouped_gmm
from fedmm.studies import run_study, summarize

CLUSTERED = {"local-em": {}, "fedem": {}, "fedgrem": {}, "d-fedem": {}, "d-fedgrem": {"graph": "ring"},
             "federico": {}, "dynamic-graph": {}}
PERSONALIZED = ("federico", "dynamic-graph", "d-fedgrem")
PAPER_METHODS = ("local-em", "fedem", "fedgrem", "d-fedem", "d-fedgrem", "federico", "dynamic-graph")
RATIO = 0.85     # pooling a group of 4 halves the error; the target asks for 15% better than local EM


def gossip_part(rounds, exchanges):
    """Part 1: (max |D-FedEM - FedEM| per graph and exchanges, error against rounds on ring / complete)."""
    X, truth = make_federated_gmm(h=0.5, random_state=0)
    data, family = FederatedData.from_input(X), GaussianFamily("identity")
    K, R, d = truth.theta.shape
    rng = np.random.RandomState(0)                              # one common start near the centres
    start = MixtureParams(np.full((K, R), 1.0 / R), np.broadcast_to(truth.centers + 0.5 * rng.randn(R, d),
                                                                     (K, R, d)).copy(), np.ones((K, R, 1)))
    # D-FedEM gossips the paper's average (client k weighted by n_k / n): its FedEM is the paper's.
    fedem = run(METHODS["fedem"](aggregation="samples"), family, data, start, rounds, 0.0).params
    gaps = {}
    for graph in ("ring", "torus", "complete"):
        for n in exchanges:
            d = run(METHODS["d-fedem"](graph=graph, n_gossip=n), family, data, start, rounds, 0.0).params
            gaps[graph, n] = float(np.abs(d.theta - fedem.theta).max())
    curve = {}
    for graph in ("ring", "complete"):
        for t in (1, 2, 5, 10, 20, 50):
            p = run(METHODS["d-fedem"](graph=graph), family, data, start, t, 0.0).params
            curve[graph, t] = float(estimation_errors(p.weights, p.theta, truth.weights, truth.theta)[1].max())
    return gaps, curve


def figure(path, gaps):
    """Left: FedeRiCo's collaborator weights on the clustered design, seed 0; right: D-FedEM's largest
    distance to FedEM's estimate against exchanges per round, by graph."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    X, _, groups = make_grouped_gmm(spread=6.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        W = FederatedGaussianMixture(3, method="federico", covariance_type="spherical", random_state=0).fit(X) \
            .collaborator_weights_
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    image = left.imshow(W, cmap="viridis", vmin=0, vmax=1)
    labels = [f"{k} ({'out' if g < 0 else 'g' + str(g + 1)})" for k, g in enumerate(groups)]
    left.set_xticks(range(len(W)), labels, rotation=90, fontsize=7)
    left.set_yticks(range(len(W)), labels, fontsize=7)
    left.set_xlabel("model of client j")
    left.set_ylabel("client i")
    left.set_title("FedeRiCo: collaborator weights w_ij\n(3 groups of 4 clients + 1 outlier)")
    fig.colorbar(image, ax=left, fraction=0.046)
    exchanges = sorted({n for _, n in gaps})
    for graph, marker in (("ring", "o"), ("torus", "s"), ("complete", "^")):
        right.plot(exchanges, [max(gaps[graph, n], 1e-16) for n in exchanges], marker=marker, label=graph)
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("gossip exchanges per round")
    right.set_ylabel("max |theta(D-FedEM) - theta(FedEM)|")
    right.set_title("D-FedEM reaches FedEM as mixing grows\n(paper's GMM design, 60 rounds, one start)")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def real_data():
    """Part 4: per-client ARI of every method on penguins by island and wine over five random clients."""
    from palmerpenguins import load_penguins
    from sklearn.datasets import load_wine
    from sklearn.metrics import adjusted_rand_score
    from sklearn.preprocessing import StandardScaler
    penguins = load_penguins().dropna()
    wine = load_wine()
    cases = {"penguins, clients = islands (full)": (
                 penguins[["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]],
                 penguins["island"].to_numpy(), penguins["species"].to_numpy(), "full"),
             "wine, 5 random clients (diag)": (
                 StandardScaler().fit_transform(wine.data), np.random.RandomState(0).randint(5, size=len(wine.data)),
                 wine.target, "diag")}
    out = {}
    for case, (X, groups, truth, covariance) in cases.items():
        for method, options in CLUSTERED.items():
            options = {} if method == "d-fedgrem" else options      # its default graph, not the groups' ring
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                fit = FederatedGaussianMixture(3, covariance_type=covariance, random_state=0,
                                               **gather_options({"method": method, **options})).fit(X, groups=groups)
            labels = fit.predict(X, groups=groups)
            out[case, method] = np.mean([adjusted_rand_score(truth[groups == k], labels[groups == k])
                                         for k in np.unique(groups) if len(np.unique(truth[groups == k])) > 1])
    return list(cases), out


def clustered_fit(seed):
    """Part 2, one seed: per method the groups' mean errors, plus FedeRiCo's and the dynamic graph's accounts."""
    X, truth, groups = make_grouped_gmm(spread=6.0, random_state=seed)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for method, options in CLUSTERED.items():
            fit = FederatedGaussianMixture(3, covariance_type="spherical", random_state=seed,
                                           **gather_options({"method": method, **options})).fit(X)
            error = estimation_errors(fit.weights_, fit.means_, truth.weights, truth.theta)[1]
            out[method] = [float(error[groups == g].mean()) for g in range(3)]
            if method == "federico":
                W = fit.collaborator_weights_
                out["same-group weight"] = float(min(W[k, groups == groups[k]].sum()
                                                     for k in np.flatnonzero(groups >= 0)))
            if method == "dynamic-graph":
                G, same = fit.collaboration_graph_, (groups[:, None] == groups[None]) & (groups[:, None] >= 0)
                out["cross-group links"] = int((G & ~same).sum() // 2)
                out["missing in-group links"] = int((same & ~G & ~np.eye(len(groups), dtype=bool)).sum() // 2)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, few exchanges, part 3 skipped (CI)")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--figure", default=None, help="write the figure there (needs matplotlib)")
    args = parser.parse_args(argv)
    seeds = range(args.seeds or (3 if args.quick else 20))
    began = time.time()
    checks = []

    gaps, curve = gossip_part(20 if args.quick else 60, (1, 16) if args.quick else (1, 4, 16, 64))
    exchanges = sorted({n for _, n in gaps})
    print("## 1. D-FedEM against FedEM\n\nmax |theta(D-FedEM) - theta(FedEM)| after the rounds, same start:\n")
    print("| graph | " + " | ".join(f"{n} exchanges" for n in exchanges) + " |\n|---|" + "---|" * len(exchanges))
    for graph in ("ring", "torus", "complete"):
        print(f"| {graph} | " + " | ".join(f"{gaps[graph, n]:.2g}" for n in exchanges) + " |")
        row = [gaps[graph, n] for n in exchanges]
        checks.append((f"D-FedEM on the {graph} approaches FedEM as exchanges grow: {row[-1]:.2g} < {row[0]:.2g}"
                       if graph != "complete" else f"D-FedEM on the complete graph is FedEM: {row[0]:.2g} < 1e-8",
                       row[-1] < row[0] if graph != "complete" else row[0] < 1e-8))
    print("\nEstimation error (max over clients) against rounds, one exchange per round:\n")
    ts = sorted({t for _, t in curve})
    print("| graph | " + " | ".join(f"t={t}" for t in ts) + " |\n|---|" + "---|" * len(ts))
    for graph in ("ring", "complete"):
        print(f"| {graph} | " + " | ".join(f"{curve[graph, t]:.3f}" for t in ts) + " |")

    results = Parallel(n_jobs=-1)(delayed(clustered_fit)(seed) for seed in seeds)
    errors = {m: np.array([r[m] for r in results]) for m in CLUSTERED}                   # (seeds, groups)
    median = {m: np.median(e, axis=0) for m, e in errors.items()}
    print(f"\n## 2. Clustered design ({len(seeds)} seeds)\n\nMean parameter error of each group's clients, "
          "median over seeds (ratio to local EM):\n")
    print("| method | group 1 | group 2 | group 3 |\n|---|---|---|---|")
    for m in CLUSTERED:
        ratio = np.median(errors[m] / errors["local-em"], axis=0)
        print(f"| {m} | " + " | ".join(f"{e:.3f} ({q:.2f})" for e, q in zip(median[m], ratio)) + " |")
        if m in PERSONALIZED or m == "fedgrem":   # FedGrEM: a centre per group (docs/fedgrem.md)
            checks.append((f"{m} beats local EM on every group: median ratios {np.round(ratio, 2).tolist()} "
                           f"< {RATIO}", (ratio < RATIO).all()))
        if m == "fedem":
            checks.append((f"FedEM does not beat local EM on any group: median ratios {np.round(ratio, 2).tolist()} "
                           "> 1", (ratio > 1).all()))
    same = min(r["same-group weight"] for r in results)
    cross = sum(r["cross-group links"] for r in results)
    missing = [r["missing in-group links"] for r in results]
    print(f"\nFedeRiCo: smallest weight an honest client puts on its own group: {same:.4f}.  "
          f"Dynamic graph: {cross} links across groups in all seeds; in-group links missing (of 18) per seed: "
          f"{missing}.")
    checks.append((f"FedeRiCo's weights concentrate on the own group: min {same:.3f} > 0.9", same > 0.9))
    checks.append((f"the dynamic graph links no clients of different groups: {cross} links", cross == 0))

    if not args.quick:
        settings = [{"h": 0.0, "outlier_clients": [9]}, {"h": 1.0, "outlier_clients": [9]}]
        rows = run_study("gmm", PAPER_METHODS, settings, reps=len(seeds), fit_options={"max_iter": 1000},
                         n_jobs=-1)
        error, floats = summarize(rows, "theta_error"), summarize(rows, "floats")
        print(f"\n## 3. The FedGrEM paper's GMM design, one outlier client ({len(seeds)} seeds)\n\n"
              "Maximum parameter error over honest clients, mean (sd); floats sent per fit (mean):\n")
        print("| method | h = 0 | h = 1 | floats, h = 0 |\n|---|---|---|---|")
        for m in PAPER_METHODS:
            print(f"| {m} | " + " | ".join("%.3f (%.3f)" % error[(h, m)] for h in (0.0, 1.0))
                  + f" | {floats[(0.0, m)][0]:.3g} |")

        cases, ari = real_data()
        print("\n## 4. Real data: adjusted Rand index per client, averaged\n")
        print("| method | " + " | ".join(cases) + " |\n|---|" + "---|" * len(cases))
        for m in CLUSTERED:
            print(f"| {m} | " + " | ".join(f"{ari[c, m]:.3f}" for c in cases) + " |")

    if args.figure:
        print(f"\nfigure: {figure(args.figure, gaps)}")
    print("\nChecks:\n" + "\n".join(f"- {'holds' if ok else 'DOES NOT HOLD'}: {text}" for text, ok in checks))
    print(f"\n{time.time() - began:.0f} s")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
