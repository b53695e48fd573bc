"""Does FedGrEM's measured error stay under its bound (Cor. A.12) and follow its shape?

Measures FedGrEM's error (mean over replications of the max over non-outlier clients) on the
design of validation/rates.py (GMM, d = 3, R = 2, well separated) along four sweeps from a base
setting K = 8, n = 200, h = 0, eps = 0: K, h (training), n and eps (held out). One constant
per statistical term (aggregation, mixing, heterogeneity, outliers; T is large enough that the
iterative term is nil) is fitted by non-negative least squares of the relative error on the
training settings (the K and h sweeps and the largest eps: every term must be non-zero in
training), then scaled up just enough to cover every training point. The check, on the held-out
settings (the n sweep, the other eps): the fitted bound stays above the measured error (within
two standard errors of the replications), and tracks its shape (the correlation of their
logarithms above 0.8). Writes docs/img/bounds.png; exits non-zero on failure.

    python validation/bounds.py [--quick]
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from fedmm.studies import run_study
from fedmm.theory import bound

CENTERS = np.array([[0.0, 0.0, 0.0], [8.0, 0.0, 0.0]])
FIGURE = Path(__file__).resolve().parents[1] / "docs/img/bounds.png"
STAT_TERMS = ("aggregation", "mixing", "heterogeneity", "outliers")


def measure(sweeps, reps):
    settings, labels = [], []
    for name, values in sweeps.items():
        for v in values:
            s = {"K": 8, "n": 200, "h": 0.0, "eps": 0.0, name: v}
            outliers = tuple(range(int(round(s["eps"] * s["K"]))))
            settings.append({"centers": CENTERS, "concentration": 50.0, "n_clients": s["K"], "n_samples": s["n"],
                             "h": s["h"], "outlier_clients": outliers})
            labels.append((name, s))
    rows = run_study("gmm", ("fedgrem",), settings, reps, 0, {"n_init": 3, "max_iter": 1000, "tol": 1e-6}, n_jobs=-1)
    values = np.array([r["theta_error"] for r in rows]).reshape(len(settings), reps)
    return labels, values.mean(axis=1), values.std(axis=1, ddof=1) / np.sqrt(reps)


def terms(setting):
    b = bound("gmm", n=setting["n"], K=setting["K"], d=3, R=2, h=setting["h"], eps=setting["eps"], M=1.0, c_w=1.0)
    return np.array([b.terms[t] for t in STAT_TERMS])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--figure", default=str(FIGURE))
    args = parser.parse_args(argv)
    reps = 4 if args.quick else 12
    sweeps = {"K": [2, 4, 8, 16, 32], "h": [0.0, 0.25, 0.5, 1.0, 2.0], "n": [100, 200, 400, 800, 1600],
              "eps": [0.0, 0.125, 0.25]}
    labels, measured, se = measure(sweeps, reps)
    A = np.array([terms(s) for _, s in labels])
    # Every term must be non-zero somewhere in training to be fitted: the K and h sweeps, plus the
    # largest eps. Held out: the n sweep and the other eps.
    train = np.array([name in ("K", "h") or (name == "eps" and s["eps"] == max(sweeps["eps"])) for name, s in labels])
    # Relative least squares: divide every row by the measured error, so each setting weighs the same.
    constants, _ = nnls(A[train] / measured[train, None], np.ones(train.sum()))
    fitted = A @ constants
    scale = max(1.0, float((measured[train] / fitted[train]).max()))
    fitted *= scale
    held = ~train
    # The measured errors are means of `reps` replications: "above" allows two standard errors.
    above = bool(np.all(fitted[held] >= measured[held] - 2 * se[held]))
    corr = float(np.corrcoef(np.log(fitted[held]), np.log(measured[held]))[0, 1])
    print(f"fitted constants (x{scale:.2f} to cover the training sweeps): "
          + ", ".join(f"{t} {c * scale:.3g}" for t, c in zip(STAT_TERMS, constants)))
    print(f"{'sweep':>6}{'value':>8}{'measured':>10}{'(se)':>8}{'bound':>10}")
    for (name, s), m, e, f, is_train in zip(labels, measured, se, fitted, train):
        print(f"{name:>6}{s[name]:>8g}{m:>10.4f}{e:>8.4f}{f:>10.4f}{'  (train)' if is_train else ''}")
    print(f"held out: bound >= measured - 2 se everywhere: {above}; log-correlation {corr:.2f} (want > 0.8)")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    for ax, name in zip(axes, sweeps):
        idx = [i for i, (n_, _) in enumerate(labels) if n_ == name]
        x = [labels[i][1][name] for i in idx]
        ax.plot(x, measured[idx], "o-", label="FedGrEM, measured")
        ax.plot(x, fitted[idx], "s--", label="fitted bound (Cor. A.12)")
        ax.set_xlabel(name + ("  (held out)" if name == "n" else "  (fitted)" if name != "eps" else
                              "  (largest fitted, rest held out)"))
        if name in ("K", "n"):
            ax.set_xscale("log")
            ax.minorticks_off()
            ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.set_yscale("log")
    axes[0].set_ylabel("max error of the means")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.figure, dpi=100)
    plt.close(fig)
    print(f"figure: {args.figure}")
    ok = above and corr > 0.8
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
