"""Do FedGrEM's measured errors follow the rates of FedGrEM Cor. 3.9 / A.12?

At h = 0 and eps = 0 the bound's leading term is the aggregation rate
R^2 sqrt(d / (n K)): the log-log slope of the error in K (n fixed) and in n (K
fixed) should be -1/2. The error against h should follow min{h, local rate}
(the cost of heterogeneity), and the cost of outlier clients should grow about
linearly in eps for small eps.

Design (so that the rates, not local optima, are what is measured): d = 3,
R = 2 components 8 apart with near-equal weights (Dirichlet(50)), identity
covariances; FedGrEM with fedmm's defaults from 3 local-EM starts per client.
Every check's tolerance comes from the replications themselves (three standard
errors of the fitted quantity, plus a stated allowance); the script exits
non-zero when one fails.

    python validation/rates.py [--quick]
"""

import argparse
import sys
import time

import numpy as np

from fedmm.studies import run_study

CENTERS = np.array([[0.0, 0.0, 0.0], [8.0, 0.0, 0.0]])
FIT = {"n_init": 3, "max_iter": 1000, "tol": 1e-6}


def errors(settings, reps, methods=("fedgrem",)):
    rows = run_study("gmm", methods, settings, reps, 0, FIT, n_jobs=-1)
    return rows


def slope(x, rows, key):
    """OLS slope of log(error) on log(x) over all replications, and its standard error."""
    lx = np.log([r[key] for r in rows])
    ly = np.log([r["theta_error"] for r in rows])
    A = np.column_stack([lx, np.ones_like(lx)])
    coef, residual, *_ = np.linalg.lstsq(A, ly, rcond=None)
    sigma2 = ((ly - A @ coef) ** 2).sum() / (len(ly) - 2)
    se = np.sqrt(sigma2 / ((lx - lx.mean()) ** 2).sum())
    return coef[0], se


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer grid points and replications (CI)")
    args = parser.parse_args(argv)
    reps = 6 if args.quick else 20
    Ks = [2, 4, 8, 16, 32] if args.quick else [2, 4, 8, 16, 32, 64]
    ns = [100, 200, 400, 800, 1600] if args.quick else [100, 200, 400, 800, 1600, 3200]
    start = time.perf_counter()
    base = {"centers": CENTERS, "concentration": 50.0}
    results = {}

    rows = errors([dict(base, n_clients=K, n_samples=200) for K in Ks], reps)
    for r, K in zip(rows, np.repeat(Ks, reps)):
        r["K"] = K
    results["slope in K (n = 200)"] = slope(Ks, rows, "K")
    rows = errors([dict(base, n_clients=8, n_samples=n) for n in ns], reps)
    for r, n in zip(rows, np.repeat(ns, reps)):
        r["n"] = n
    results["slope in n (K = 8)"] = slope(ns, rows, "n")
    ok = True
    print(f"FedGrEM, GMM d=3 R=2, h=0, eps=0, {reps} replications per point")
    for name, (b, se) in results.items():
        tol = 3 * se + 0.05
        passed = abs(b + 0.5) <= tol
        ok &= passed
        print(f"  {name}: {b:+.3f} (se {se:.3f}); expected -0.5 +- {tol:.3f}  {'PASS' if passed else 'FAIL'}")

    # Error against h: min{h, local rate}. h stays below Delta / 2 = 4 (Assumption C.1 needs Delta > 2h):
    # beyond it two clients' different components can meet, and labels are no longer identifiable.
    hs = [0.0, 0.25, 1.0, 2.0] if args.quick else [0.0, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0]
    rows = errors([dict(base, n_clients=8, n_samples=200, h=h) for h in hs], reps, ("fedgrem", "local-em"))
    mean = {(h, m): np.mean([r["theta_error"] for r in rows if r["h"] == h and r["method"] == m])
            for h in hs for m in ("fedgrem", "local-em")}
    sd = {h: np.std([r["theta_error"] for r in rows if r["h"] == h and r["method"] == "fedgrem"], ddof=1)
          for h in hs}
    local = np.mean([mean[(h, "local-em")] for h in hs])
    threshold = 2 * np.sqrt(3 + np.log(8)) / 0.9 / np.sqrt(200)  # lambda_T / sqrt(n), the paper's schedule
    print(f"  error against h (local EM {local:.3f}, pooling threshold {threshold:.3f}):")
    for h in hs:
        e, tol = mean[(h, "fedgrem")], 3 * sd[h] / np.sqrt(reps)
        # Within the heterogeneity h of the h = 0 error, and within the soft-threshold offset of local EM
        # (an unpooled component sits threshold / (eta w) from its local solution; eta w >= 2/3 here).
        passed = e <= mean[(0.0, "fedgrem")] + h + tol and e <= mean[(h, "local-em")] + 1.5 * threshold + tol
        ok &= passed
        print(f"    h={h:<5} FedGrEM {e:.3f}  min(e0 + h, local + 1.5 thr) = "
              f"{min(mean[(0.0, 'fedgrem')] + h, mean[(h, 'local-em')] + 1.5 * threshold):.3f} (+ tol {tol:.3f})  "
              f"{'PASS' if passed else 'FAIL'}")

    # Cost of outliers: about linear in eps for small eps.
    K = 20
    counts = [0, 1, 2, 4] if args.quick else [0, 1, 2, 3, 4, 5]
    rows = errors([dict(base, n_clients=K, n_samples=200, outlier_clients=tuple(range(c))) for c in counts], reps)
    eps = np.repeat(np.array(counts) / K, reps)
    err = np.array([r["theta_error"] for r in rows])
    design = np.column_stack([np.ones_like(eps), eps, eps ** 2])
    coef, *_ = np.linalg.lstsq(design, err, rcond=None)
    sigma2 = ((err - design @ coef) ** 2).sum() / (len(err) - 3)
    se = np.sqrt(np.diag(sigma2 * np.linalg.inv(design.T @ design)))
    linear_ok = coef[1] > -3 * se[1] and abs(coef[2]) <= 3 * se[2] + 0.5 * abs(coef[1]) / max(eps)
    ok &= linear_ok
    print(f"  outlier cost: error = {coef[0]:.3f} + {coef[1]:.3f} eps + {coef[2]:.3f} eps^2 "
          f"(se {se[1]:.3f}, {se[2]:.3f}): linear term >= 0, quadratic term not significant  "
          f"{'PASS' if linear_ok else 'FAIL'}")
    print(f"({time.perf_counter() - start:.0f} s)  {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
