"""What a centre per group costs (issue 43): FedGrEM's default fit with ``n_centers="auto"`` against one centre.

The paper's GMM design (K = 10, n = 150, d = 10, R = 5, one outlier client, h = 0), the same with K = 1,000
clients, and the grouped design (three groups of four clients, spread 6). Each fit timed side by side in one
run, best of ``--repeats``; the ratio is the default's time over one centre's. Also the rounds each used.

    python validation/bench_groups.py [--quick] [--repeats N]
"""

import argparse
import time
import warnings

from fedmm import FederatedGaussianMixture
from fedmm.methods import FedGrEM
from fedmm.simulate import make_federated_gmm, make_grouped_gmm

DESIGNS = {
    "paper's design, K = 10": lambda: (make_federated_gmm(outlier_clients=[9], random_state=0)[0], 5, "diag"),
    "paper's design, K = 1,000": lambda: (make_federated_gmm(1000, outlier_clients=range(0, 1000, 10),
                                                             random_state=0)[0], 5, "diag"),
    "grouped design, spread 6": lambda: (make_grouped_gmm(spread=6.0, random_state=0)[0], 3, "spherical"),
}


def timed(X, R, covariance, n_centers, repeats):
    best, fit = float("inf"), None
    for _ in range(repeats):
        began = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = FederatedGaussianMixture(R, covariance_type=covariance, method=FedGrEM(n_centers=n_centers),
                                           random_state=0).fit(X)
        best = min(best, time.perf_counter() - began)
    return best, fit.n_iter_, int(fit.groups_.max()) + 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="K = 10 and the grouped design, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    designs = {k: v for k, v in DESIGNS.items() if not (args.quick and "1,000" in k)}
    print("| design | one centre (s, rounds) | a centre per group (s, rounds, groups) | ratio |\n|---|---|---|---|")
    timed(*list(designs.values())[0]()[:3], 1, 1)           # compile the kernels outside the timings
    for name, make in designs.items():
        X, R, covariance = make()
        one, auto = (timed(X, R, covariance, n, repeats) for n in (1, "auto"))
        print(f"| {name} | {one[0]:.2f}, {one[1]} | {auto[0]:.2f}, {auto[1]}, {auto[2]} | {auto[0] / one[0]:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
