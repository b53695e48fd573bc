"""Alignment cost: K = 100 clients, R = 8 components (issue target: consensus under 1 s).

Times every polynomial method on the same scrambled estimates, side by side in one
run, prints the times and their ratios to the consensus method, checks that each
aligned the clients, and exits non-zero if the consensus method misaligns or takes
1 s or more. Exhaustive search is out of reach here ((8!)^99 labellings) and says so.

    python validation/bench_alignment.py [--quick]
"""

import argparse
import sys
import time

import numpy as np

from fedmm.alignment import align


def scrambled_problem(K, R, p, seed):
    rng = np.random.RandomState(seed)
    centers = 6.0 * rng.randn(R, p)
    theta = centers + 0.3 * rng.randn(K, R, p)
    true_perm = np.array([rng.permutation(R) for _ in range(K)])
    scrambled = np.empty_like(theta)
    scrambled[np.arange(K)[:, None], true_perm] = theta
    return scrambled, true_perm


def aligned(perms, true_perm):
    labels = np.argsort(true_perm, axis=1)[np.arange(len(perms))[:, None], perms]
    return bool(np.all(labels == labels[0]))


def best_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat, B = 10 greedy orders")
    args = parser.parse_args(argv)
    K, R, p = 100, 8, 10
    repeats, n_orders = (1, 10) if args.quick else (3, 50)
    theta, true_perm = scrambled_problem(K, R, p, seed=0)
    rows = []
    for method, options in [("consensus", {}), ("stepwise", {}), ("greedy", {"n_orders": n_orders})]:
        seconds, result = best_time(lambda: align(theta, method, random_state=0, **options), repeats)
        rows.append((method, seconds, aligned(result.perms, true_perm), result.score))
    base = rows[0][1]
    print(f"K={K}, R={R}, p={p}: best of {repeats} run(s)")
    print(f"{'method':<12}{'seconds':>10}{'x consensus':>13}{'aligned':>9}{'score':>14}")
    for method, seconds, ok, value in rows:
        name = f"greedy B={n_orders}" if method == "greedy" else method
        print(f"{name:<12}{seconds:>10.4f}{seconds / base:>13.2f}{str(ok):>9}{value:>14.1f}")
    try:
        align(theta, "exhaustive")
    except ValueError as err:
        print(f"exhaustive: refused ({str(err).split(', over')[0]})")
    consensus_ok = rows[0][2] and rows[0][1] < 1.0
    print("PASS" if consensus_ok else "FAIL: consensus must align K=100, R=8 in under 1 s")
    return 0 if consensus_ok else 1


if __name__ == "__main__":
    sys.exit(main())
