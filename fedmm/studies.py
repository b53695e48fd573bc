"""Simulation studies of estimation error: a (method x h x replication) grid on the public API."""

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .estimators import FederatedGaussianMixture, FederatedMixtureRegression
from .metrics import estimation_errors
from .simulate import make_federated_gmm, make_federated_mor

__all__ = ["run_study", "summarize", "format_table", "plot_study"]


def _fit_one(model, method, h, seed, design, fit_options):
    with warnings.catch_warnings():
        # Non-convergence is recorded in the row (converged, n_iter), not printed once per fit.
        warnings.simplefilter("ignore", ConvergenceWarning)
        return _fit_and_score(model, method, h, seed, design, fit_options)


def _fit_and_score(model, method, h, seed, design, fit_options):
    if model == "gmm":
        X, truth = make_federated_gmm(h=h, random_state=seed, **design)
        est = FederatedGaussianMixture(truth.centers.shape[0], method=method, random_state=seed,
                                       **fit_options).fit(X)
        theta_hat = est.means_
    else:
        X, y, truth = make_federated_mor(h=h, random_state=seed, **design)
        est = FederatedMixtureRegression(truth.centers.shape[0], method=method, fit_intercept=False,
                                         random_state=seed, **fit_options).fit(X, y)
        theta_hat = est.coef_
    w_err, theta_err = estimation_errors(est.weights_, theta_hat, truth.weights, truth.theta)
    keep = ~truth.outliers
    return {"method": method, "h": h, "seed": seed,
            "weight_error": float(w_err[keep].max()), "theta_error": float(theta_err[keep].max()),
            "converged": bool(est.converged_), "n_iter": int(est.n_iter_)}


def run_study(model="gmm", methods=("local-em", "pooled-em"), h_values=(0.0, 1.0), reps=5,
              random_state=0, design=None, fit_options=None):
    """Fit every method on ``reps`` simulated data sets per ``h``.

    Parameters
    ----------
    model : {"gmm", "mor"}
    methods : sequence of str
        Estimator ``method=`` names.
    h_values : sequence of float
        Heterogeneity levels (distance of each client's parameters from the centres).
    reps : int
        Replications per ``h``; replication ``i`` uses seed ``random_state + i``
        for both the data and the fit, so every method sees the same data.
    design : dict, optional
        Extra arguments of :func:`fedmm.simulate.make_federated_gmm` / ``_mor``.
    fit_options : dict, optional
        Extra estimator arguments (``n_init``, ``max_iter``, ...).

    Returns
    -------
    rows : list of dict
        One row per fit: method, h, seed, the maximum over non-outlier
        clients of the weight and parameter errors (after each client's best
        permutation), and whether the fit converged (its warning is not
        printed; the row records it) in how many rounds.
    """
    design = design or {}
    fit_options = fit_options or {}
    return [_fit_one(model, method, h, random_state + i, design, fit_options)
            for h in h_values for i in range(reps) for method in methods]


def summarize(rows, metric="theta_error"):
    """Mean and standard deviation of ``metric`` per (h, method): ``{(h, method): (mean, sd)}``."""
    groups = {}
    for row in rows:
        groups.setdefault((row["h"], row["method"]), []).append(row[metric])
    return {key: (float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0)
            for key, v in groups.items()}


def format_table(rows, metric="theta_error"):
    """A text table: one line per h, one column per method, ``mean (sd)`` as the paper prints."""
    summary = summarize(rows, metric)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    hs = sorted({r["h"] for r in rows})
    width = max(14, *(len(m) + 2 for m in methods))
    lines = [f"{'h':>6}" + "".join(f"{m:>{width}}" for m in methods)]
    for h in hs:
        cells = "".join(f"{'%.3f (%.3f)' % summary[(h, m)]:>{width}}" for m in methods)
        lines.append(f"{h:>6.2f}{cells}")
    return "\n".join(lines)


def plot_study(rows, path, metric="theta_error", title=None):
    """Mean error against h, one line per method, log scale; saved to ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize(rows, metric)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    hs = sorted({r["h"] for r in rows})
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, m in enumerate(methods):
        mean = np.array([summary[(h, m)][0] for h in hs])
        # Distinct styles: EM and gradient EM often coincide, and one must not hide the other.
        ax.plot(hs, mean, marker="osD^v<>p"[i % 8], linestyle=("-", "--", "-.", ":")[i % 4],
                markersize=8 - i, label=m)
    ax.set_yscale("log")
    ax.set_xlabel("h (distance of client parameters from the centres)")
    ax.set_ylabel(f"mean of max error ({metric.replace('_', ' ')})")
    if title:
        ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
