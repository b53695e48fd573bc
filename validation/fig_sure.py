"""Figure for docs/units.md: FedGrEM's penalty chosen by SURE against the paper's schedule, across h.

The paper's GMM design (App. B.1: K = 10, n = 150, d = 10, R = 5, one outlier client) and model
(identity covariance), fitted as the studies fit it; for each h the mean over replications of the
maximum error of the means over the honest clients, for FedGrEM with ``penalty="paper"`` and with
``penalty="sure"``, and for local and pooled EM as the two ends. Writes docs/img/sure.png and exits
non-zero unless SURE is below the schedule at h = 0 (where the schedule leaves components unpooled)
and within 20% of it at the largest h.

    python validation/fig_sure.py [--quick] [--out PATH]
"""

import argparse
import sys
from pathlib import Path

import numpy as np

from fedmm.methods import FedGrEM
from fedmm.studies import run_study

FIGURE = Path(__file__).resolve().parents[1] / "docs/img/sure.png"


def mean_errors(rows, h_values):
    """``{label: [mean theta_error at each h]}`` from one study's rows."""
    return {method: [np.mean([r["theta_error"] for r in rows if r["method"] == method and r["h"] == h])
                     for h in h_values] for method in sorted({r["method"] for r in rows})}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="h in {0, 2}, 3 replications")
    parser.add_argument("--out", default=str(FIGURE))
    args = parser.parse_args(argv)
    h_values, reps = ((0.0, 2.0), 3) if args.quick else (tuple(np.arange(0.0, 2.01, 0.25)), 20)
    settings = [{"h": h, "outlier_clients": (9,)} for h in h_values]
    curves = {}
    for penalty in ("paper", "sure"):
        methods = {"fedgrem": FedGrEM(penalty=penalty, pooling_sizes="client")}  # the studies' paper weights
        methods.update({m: m for m in ("local-em", "pooled-em") if penalty == "paper"})
        rows = run_study("gmm", methods, settings, reps, fit_options={"n_init": 3}, n_jobs=-1)
        for method, errors in mean_errors(rows, h_values).items():
            curves[f"FedGrEM, penalty={penalty!r}" if method == "fedgrem" else method] = errors
    print("mean over", reps, "replications of the max error of the means over honest clients")
    print(f"{'h':>6}" + "".join(f"{label:>28}" for label in curves))
    for i, h in enumerate(h_values):
        print(f"{h:>6.2f}" + "".join(f"{errors[i]:>28.3f}" for errors in curves.values()))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    styles = {"local-em": "s:", "pooled-em": "^:"}  # the two ends dotted, FedGrEM's two penalties solid
    for label, errors in curves.items():
        ax.plot(h_values, errors, styles.get(label, "o-" if "paper" in label else "v-"), label=label)
    ax.set_yscale("log")
    ax.set_xlabel("h (every honest client's means at distance h from the centre)")
    ax.set_ylabel("max error of the means, honest clients")
    ax.set_title(f"Paper's GMM design, one outlier client, {reps} replications")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"figure: {args.out}")

    paper, sure = curves["FedGrEM, penalty='paper'"], curves["FedGrEM, penalty='sure'"]
    checks = {f"h = 0: sure {sure[0]:.3f} < paper {paper[0]:.3f}": sure[0] < paper[0],
              f"h = {h_values[-1]:.2f}: sure {sure[-1]:.3f} <= 1.2 x paper {paper[-1]:.3f}": sure[-1] <= 1.2 * paper[-1]}
    for text, ok in checks.items():
        print(f"{'met' if ok else 'MISSED'}: {text}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
