"""Figure for docs/alignment.md: what misaligned labels do to a pooled estimate.

Ten clients fit 3-component Gaussian mixtures locally (each labels its components in
its own order); averaging their means label by label, as every federated method
does, collapses the components towards the middle unless the labels are aligned
first. Writes docs/img/misalignment.png and exits non-zero if the aligned average
is not much closer to the truth than the unaligned one.

    python validation/fig_misalignment.py [--quick] [--out PATH]
"""

import argparse
import sys
from pathlib import Path

import numpy as np

from fedmm import FederatedGaussianMixture
from fedmm.metrics import best_permutation
from fedmm.simulate import make_federated_gmm

CENTERS = np.array([[0.0, 0.0], [6.0, 0.0], [3.0, 5.0]])


def pooled_error(means, centers):
    average = means.mean(axis=0)
    return np.linalg.norm(average[best_permutation(average, centers)] - centers, axis=1).max(), average


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="(same work; it is already quick)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs/img/misalignment.png"))
    args = parser.parse_args(argv)
    X, truth = make_federated_gmm(10, 200, centers=CENTERS, h=0.3, random_state=0)
    fits = {name: FederatedGaussianMixture(3, method="local-em", alignment=alignment, random_state=0).fit(X)
            for name, alignment in [("as estimated", None), ("aligned (consensus)", "consensus")]}

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4), sharex=True, sharey=True)
    errors = {}
    for ax, (name, gm) in zip(axes, fits.items()):
        errors[name], average = pooled_error(gm.means_, CENTERS)
        allX = np.concatenate(X)
        ax.scatter(allX[:, 0], allX[:, 1], s=2, c="0.85")
        for r, color in enumerate(["tab:blue", "tab:orange", "tab:green"]):
            ax.scatter(gm.means_[:, r, 0], gm.means_[:, r, 1], s=30, color=color, label=f"clients' label {r}")
            ax.scatter(*average[r], s=250, marker="X", color=color, edgecolor="k")
        ax.scatter(CENTERS[:, 0], CENTERS[:, 1], s=120, facecolor="none", edgecolor="k", label="true centres")
        ax.set_title(f"labels {name}\nlabel-wise average (X): max error {errors[name]:.2f}")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"max error of the label-wise average: {errors}")
    print(f"figure: {args.out}")
    ok = errors["aligned (consensus)"] < 0.5 < errors["as estimated"]
    print("PASS" if ok else "FAIL: alignment should fix the pooled average")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
