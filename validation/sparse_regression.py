"""Sparse FedGrEM for mixtures of regressions against the dimension (issue 64): error against d, support recovery.

The design (issue 64's, for regressions): two components ``y = x^T beta_r + N(0, 1)``, ``x ~ N(0, I_d)``,
``beta_2 = -beta_1`` (FedGrEM's MoR model, Sec. 3.4, whose marginal correlation of ``y`` with every feature is
0), ``beta_1`` of norm ``B = 3`` on the first ``s = 5`` coordinates (random signs) and 0 elsewhere, equal
proportions; ``K = 10`` clients of ``n = 150`` rows whose coefficients differ from those by a vector of norm
``h = 0.2`` on the support; one outlier client, ``y = x^T (3 / sqrt(d)) 1_d * 3 + N(0, 1)`` (FedGrEM App. B.1's
dense ``3 * 1_d`` coefficients, scaled to the same ``y`` spread at every ``d``). Error: the largest honest-client
distance of a component's coefficients to its true value (the worse component, after the better of the two
labellings per client). All fits with the estimator's defaults (``fit_intercept=True``,
``noise_variance="component"``):

- ``sparse-fedgrem``: the method from its default start (``fedmm.algorithms.sparse_start``);
- ``fedgrem``: dense FedGrEM (defaults), at ``d <= --dense-max-d`` (200) only: its start (trimmed pooled EM and
  local EM, every coefficient) took 142 s at ``d = 200`` and over 17 minutes at ``d = 500`` on the development
  machine (2 shared cores), and at ``d = 200`` it already fails to find the components (error 4.3);
- ``local sparse``: sparse-fedgrem fitted on each honest client alone (``--local``: one fit per client);
- ``oracle``: EM (fedmm's pooled EM, ``n_init=5``) on the honest clients' pooled rows restricted to the true
  support, zero elsewhere: the l1-penalized pooled mixture regression of Stadler, Buhlmann & van de Geer (2010)
  with the support known.

Targets (issue 64): sparse-fedgrem within 2x the oracle's error at every ``d``, and at most a quarter of dense
FedGrEM's where dense FedGrEM ran; the support's true and false positives reported. The script exits 1 when a
target is missed.

    python validation/sparse_regression.py [--quick] [--seeds N] [--d 100,200,500,1000] [--local] [--dense-max-d D]
"""

import argparse
import sys
import time
import warnings

import numpy as np

from fedmm import FederatedMixtureRegression

S, NORM, K, N_ROWS, H = 5, 3.0, 10, 150, 0.2


def make_sparse_mor(d, s=S, n_clients=K, n_samples=N_ROWS, h=H, outlier=True, seed=0):
    """``(X, y, coefs)``: the clients' rows (the outlier last) and the honest clients' true coefficients (K, 2, d)."""
    rng = np.random.default_rng(seed)
    beta = np.zeros((2, d))
    beta[0, :s] = rng.choice([-1.0, 1.0], size=s) * NORM / np.sqrt(s)
    beta[1] = -beta[0]
    X, y, coefs = [], [], []
    for _ in range(n_clients):
        shift = rng.normal(size=(2, s))
        b = beta.copy()
        b[:, :s] += shift * h / np.linalg.norm(shift, axis=1, keepdims=True)
        rows, labels = rng.normal(size=(n_samples, d)), rng.integers(0, 2, n_samples)
        X.append(rows)
        y.append(np.einsum("ij,ij->i", rows, b[labels]) + rng.normal(size=n_samples))
        coefs.append(b)
    if outlier:
        rows = rng.normal(size=(n_samples, d))
        X.append(rows)
        y.append(rows @ np.full(d, 9.0 / np.sqrt(d)) + rng.normal(size=n_samples))
    return X, y, np.array(coefs)


def worst_error(estimates, coefs):
    """The largest honest-client error: per client the worse component after the better labelling."""
    return max(min(np.linalg.norm(e - c, axis=1).max(), np.linalg.norm(e[::-1] - c, axis=1).max())
               for e, c in zip(estimates, coefs))


def _fit(X, y, method, seed, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FederatedMixtureRegression(2, method=method, random_state=seed, **kwargs).fit(X, y)


def oracle(X_honest, y_honest, d, seed):
    """Pooled EM on the honest rows' true support, zero elsewhere: (2, d)."""
    fit = _fit([np.vstack(X_honest)[:, :S]], [np.concatenate(y_honest)], "pooled-em", seed, n_init=5)
    full = np.zeros((2, d))
    full[:, :S] = fit.coef_[0]
    return full


def one_setting(d, seed, local, dense_max_d):
    """Errors of every method, sparse-fedgrem's support and seconds at one ``d`` and seed."""
    X, y, coefs = make_sparse_mor(d, seed=seed)
    t0 = time.perf_counter()
    sparse = _fit(X, y, "sparse-fedgrem", seed)
    seconds = time.perf_counter() - t0
    dense = worst_error(_fit(X, y, "fedgrem", seed).coef_[:K], coefs) if d <= dense_max_d else np.nan
    best = oracle(X[:K], y[:K], d, seed)
    row = {"sparse-fedgrem": worst_error(sparse.coef_[:K], coefs), "fedgrem": dense,
           "oracle": worst_error(np.broadcast_to(best, coefs.shape), coefs),
           "TP": int(sparse.support_[:S].sum()), "FP": int(sparse.support_[S:].sum()),
           "outlier flagged": int(K in sparse.suspected_outliers_), "seconds": seconds}
    if local:
        row["local sparse"] = worst_error(np.stack([_fit([x], [t], "sparse-fedgrem", seed).coef_[0]
                                                    for x, t in zip(X[:K], y[:K])]), coefs)
    return row


def error_table(ds, seeds, local, dense_max_d):
    rows = []
    for d in ds:
        runs = [one_setting(d, seed, local, dense_max_d) for seed in range(seeds)]
        row = {"d": d, **{key: float(np.mean([r[key] for r in runs])) for key in runs[0]},
               "worst ratio": max(r["sparse-fedgrem"] / r["oracle"] for r in runs)}
        rows.append(row)
        print(f"{d:>6} " + " ".join(f"{row.get(key, np.nan):>14.3f}" for key in METHODS) +
              f" {row['TP']:>5.1f} {row['FP']:>5.1f} {row['outlier flagged']:>7.2f} {row['seconds']:>7.1f}",
              flush=True)
    return rows


METHODS = ("sparse-fedgrem", "fedgrem", "local sparse", "oracle")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="d = 100, 2 seeds")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--d", type=str, default=None, help="comma-separated d (default 100, 200, 500, 1000)")
    parser.add_argument("--local", action="store_true", help="also local sparse EM (one fit per client)")
    parser.add_argument("--dense-max-d", type=int, default=200, help="dense FedGrEM at d up to this only")
    args = parser.parse_args(argv)
    seeds = args.seeds or (2 if args.quick else 5)
    ds = [int(d) for d in args.d.split(",")] if args.d else (100,) if args.quick else (100, 200, 500, 1000)
    print(f"largest honest-client coefficient error, mean of {seeds} seeds; support of sparse-fedgrem (true {S}); "
          "seconds of a sparse-fedgrem fit")
    print(f"{'d':>6} " + " ".join(f"{m:>14}" for m in METHODS) + f" {'TP':>5} {'FP':>5} {'flagged':>7} "
          f"{'seconds':>7}")
    rows = error_table(ds, seeds, args.local, args.dense_max_d)
    # Where dense FedGrEM did not run (nan) its target is not checked, and the line below says so.
    failed = [r["d"] for r in rows if not (r["sparse-fedgrem"] <= 2 * r["oracle"]
                                          and not r["sparse-fedgrem"] > r["fedgrem"] / 4)]
    for r in rows:
        dense = f"{r['sparse-fedgrem'] / r['fedgrem']:.2f} (target <= 0.25)" if np.isfinite(r["fedgrem"]) else \
            "not measured (dense FedGrEM not run)"
        print(f"  d = {r['d']}: sparse / oracle {r['sparse-fedgrem'] / r['oracle']:.2f} (target <= 2; worst seed "
              f"{r['worst ratio']:.2f}), sparse / fedgrem {dense}")
    print("FAIL at d = " + ", ".join(map(str, failed)) if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
