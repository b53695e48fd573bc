"""Figure for docs/fedgrem.md: a fitted federation, client by client.

Six clients draw from three Gaussian components in two dimensions, each client's centres within h of
the common ones, client 5 an outlier (``make_federated_gmm``'s N(2 1, 3 I) rows). FedGrEM (the defaults)
is fitted; each panel shows one client's rows, its fitted components (two-standard-deviation ellipses)
and the consensus ``center_`` (crosses). Writes docs/img/clients.png.

    python validation/fig_clients.py [--out PATH]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Ellipse  # noqa: E402

from fedmm import FederatedGaussianMixture  # noqa: E402
from fedmm.simulate import make_federated_gmm  # noqa: E402

FIGURE = Path(__file__).resolve().parents[1] / "docs/img/clients.png"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIGURE)
    args = parser.parse_args(argv)

    centers = np.array([[-3.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    X, truth = make_federated_gmm(n_clients=6, n_samples=120, centers=centers, h=0.3,
                                  outlier_clients=[5], random_state=1)
    gm = FederatedGaussianMixture(3, random_state=0).fit(X)
    colours = ["tab:blue", "tab:orange", "tab:green"]
    fig, axes = plt.subplots(2, 3, figsize=(9, 5.6), sharex=True, sharey=True)
    labels = gm.predict(X)
    for k, ax in enumerate(axes.flat):
        ax.scatter(X[k][:, 0], X[k][:, 1], s=5, c=[colours[r] for r in labels[k]], alpha=0.35)
        for r in range(3):
            sd = np.sqrt(gm.covariances_[k, r])
            ax.add_patch(Ellipse(gm.means_[k, r], 4 * sd[0], 4 * sd[1], fill=False, lw=1.5,
                                 color=colours[r], ls="-" if gm.pooled_[k, r] else "--"))
        ax.scatter(gm.center_[:, 0], gm.center_[:, 1], marker="x", c="k", s=50, label="consensus")
        flag = " (flagged outlier)" if k in gm.suspected_outliers_ else ""
        ax.set_title(f"client {k}: {int(gm.pooled_[k].sum())} of 3 pooled{flag}", fontsize=9)
    axes.flat[0].legend(loc="upper left", fontsize=8)
    fig.suptitle("FedGrEM: each client's components (solid: on the consensus, dashed: its own)", fontsize=10)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=70)
    print(f"wrote {args.out}; pooled {gm.pooled_.sum()} of {gm.pooled_.size}; "
          f"suspected {list(gm.suspected_outliers_)}")


if __name__ == "__main__":
    main()
