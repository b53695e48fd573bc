"""FedGrEM Fig. 3 for GMM and MoR: every method's error against h / SNR, and the paper's claims checked.

Design of App. B.1 (K = 10, n = 150, d = 10, R = 5, Dirichlet(5) proportions, client 9 an
outlier), all methods of Fig. 3 but FedGMM, h on a grid, replications with shared data.
Writes validation/results/fig3-{gmm,mor}.png and validation/results/fig3.md (the fragment
docs/research/validation.md is built from). Claims checked (Sec. 4.1), exit non-zero if one fails:

1. at h = 0, FedGrEM's error of the parameters is the smallest of all methods;
2. at the largest h, FedGrEM is comparable to local EM: within 1.5 pooling thresholds
   (lambda_T / sqrt(n) = 0.64) of it, or better;
3. FedEM and TGMM, which do not adapt, get worse as h grows.

    python validation/fig3.py [--quick] [--reps N] [--jobs N]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from fedmm.studies import ALL_METHODS, format_table, plot_study, run_study, summarize, write_csv

OUT = Path(__file__).resolve().parent / "results"
THRESHOLD = 2 * np.sqrt(10 + np.log(10)) / 0.9 / np.sqrt(150)


def check(rows, hs):
    theta = summarize(rows)
    h0, h1 = hs[0], hs[-1]
    best_other = min(theta[(h0, m)][0] for m in ALL_METHODS if m != "fedgrem")
    claims = {
        "FedGrEM best at h = 0": theta[(h0, "fedgrem")][0] <= best_other,
        "FedGrEM comparable to local EM at the largest h":
            theta[(h1, "fedgrem")][0] <= theta[(h1, "local-em")][0] + 1.5 * THRESHOLD,
        "FedEM and TGMM degrade with h": all(theta[(h1, m)][0] > theta[(h0, m)][0] for m in ("fedem", "tgmm")),
    }
    return claims


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="h in {0, 2}, 2 replications")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=-1)
    args = parser.parse_args(argv)
    hs = [0.0, 2.0] if args.quick else [0.0, 0.5, 1.0, 1.5, 2.0]
    reps = args.reps or (2 if args.quick else 10)
    OUT.mkdir(exist_ok=True)
    ok, lines = True, [f"## Fig. 3: every method against h ({reps} replications per h; the paper: 100)", ""]
    for model in ("gmm", "mor"):
        start = time.perf_counter()
        settings = [{"h": h, "outlier_clients": (9,)} for h in hs]
        rows = run_study(model, ALL_METHODS, settings, reps, 0, {"n_init": 5, "max_iter": 1000, "tol": 1e-5},
                         n_jobs=args.jobs, progress=not args.quick)
        write_csv(rows, OUT / f"fig3-{model}.csv")
        plot_study(rows, OUT / f"fig3-{model}.png", title=f"Fig. 3, {model.upper()} (App. B.1 design)",
                   by="h_over_snr")
        claims = check(rows, hs)
        ok &= all(claims.values())
        lines += [f"### {model.upper()} ({time.perf_counter() - start:.0f} s)", "",
                  f"![Fig. 3 {model}](../../validation/results/fig3-{model}.png)", "",
                  "Mean (sd) of the maximum error of the parameters over the non-outlier clients:", "", "```",
                  format_table(rows, "theta_error"), "```", "", "Mixing proportions:", "", "```",
                  format_table(rows, "weight_error"), "```", ""]
        lines += [f"- {name}: {'holds' if held else 'FAILS'}" for name, held in claims.items()] + [""]
    (OUT / "fig3.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
