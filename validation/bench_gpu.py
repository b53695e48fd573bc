"""GPU benchmark: fedmm's CuPy backend against PyCave's published GPU time, scikit-learn and fedmm's Numba.

PyCave's benchmark page (github.com/borchero/pycave, ``docs/sites/benchmark.rst``) gives 7.7 s for 100
EM iterations of a diagonal-covariance Gaussian mixture at ``[1M, 64] -> 64`` (n = 10^6 samples, d = 64
features, R = 64 components), "PyCave GPU (full)" on one GeForce GTX 1080 Ti: 77 ms per iteration. Its
scikit-learn cell at that size is empty; at ``[100k, 32] -> 16`` it gives 509 ms on the GPU and 18.8 s
for scikit-learn, per 100 iterations (5.1 ms and 188 ms per iteration).

Side by side in one run, on one client with diagonal covariances, float64 (PyCave computes in float32):

- ``cupy round``: fedmm's E-step and M-step with the CuPy kernels (``family.estep`` + ``em_update``),
  the samples already on the device (the kernels' cache), best of the repeats; ``cupy E-step`` the
  E-step alone; ``first round`` the first, which also sends the samples to the device;
- ``cupy fit``: per round of a ``pooled-em`` estimator fit with ``backend="cupy"`` as a user runs it
  (fits of 11 and 1 rounds from the same start, differenced): what a round costs in a fit;
- ``numba round``: the same round with the Numba kernels on all the machine's cores;
- ``sklearn``: one iteration of ``sklearn.mixture.GaussianMixture(covariance_type="diag")`` on the CPU
  (fits of 3 and 1 iterations, differenced);

then the ratios, and a check that the CuPy round's statistics equal the Numba round's.

    python validation/bench_gpu.py --quick    # n = 1e6, d = 64, R = 64 (PyCave's largest diagonal row)
    python validation/bench_gpu.py            # and PyCave's [100k, 32] -> 16
    python validation/bench_gpu.py --smoke    # tiny sizes: checks that it runs (the numpy stand-in
                                              # for CuPy where there is no GPU: tests/test_cupy_standin.py)
"""

import argparse
import json
import os
import platform
import sys
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

from fedmm import FederatedGaussianMixture
from fedmm.algorithms._base import em_update
from fedmm.data import FederatedData
from fedmm.families import GaussianFamily, MixtureParams
from fedmm.kernels import gpu_available

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_kernels import best_of  # noqa: E402  (one timer for the benchmarks)

#: PyCave's published seconds per iteration, GPU (full batch) and scikit-learn, diagonal covariances.
PYCAVE = {(10 ** 6, 64, 64): (7.7 / 100, None), (10 ** 5, 32, 16): (0.509 / 100, 18.8 / 100)}


def per_iteration(fit, few, many, repeats):
    """Seconds per iteration: fits of ``many`` and ``few`` iterations from the same start, differenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return max(best_of(lambda: fit(many), repeats) - best_of(lambda: fit(few), repeats), 0.0) / (many - few)


def kernel_round(X, R, backend, repeats):
    """(first round, best round, best E-step, the round's statistics) with ``backend``'s kernels."""
    data = FederatedData(X, None, np.array([0, len(X)]), np.array([0]))
    family = GaussianFamily("diag", backend=backend)
    rng = np.random.RandomState(0)
    params = MixtureParams(np.full((1, R), 1.0 / R), X[rng.choice(len(X), R, replace=False)][None].astype(float),
                           np.ones((1, R, X.shape[1])))
    stats = []

    def round_():
        _, s = family.estep(data, params)
        stats.append(s)
        em_update(family, s, data.n_samples)

    first = best_of(round_, 1)  # sends the samples (cupy), compiles (numba)
    return first, best_of(round_, repeats), best_of(lambda: family.estep(data, params), repeats), stats[-1]


def estimator_round(X, R, backend, repeats):
    means = X[np.random.RandomState(0).choice(len(X), R, replace=False)]
    fit = lambda rounds: FederatedGaussianMixture(  # noqa: E731
        R, method="pooled-em", covariance_type="diag", means_init=means, max_iter=rounds, tol=0.0,
        backend=backend).fit([X])
    return per_iteration(fit, 1, 11, repeats)


def sklearn_iteration(X, R, repeats):
    return per_iteration(lambda iterations: GaussianMixture(
        R, covariance_type="diag", max_iter=iterations, tol=0.0, init_params="random_from_data",
        random_state=0).fit(X), 1, 3, repeats)


def max_relative_difference(a, b):
    return max(float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300)) for x, y in zip(a, b) if x is not None)


def measure(n, d, R, repeats, gpu):
    X = np.random.RandomState(1).randn(n, d)
    row = {"n": n, "d": d, "R": R}
    print(f"\n[n = {n:.0e}, d = {d}, R = {R}]", flush=True)
    if gpu:
        row["cupy_first"], row["cupy_round"], row["cupy_estep"], cupy_stats = kernel_round(X, R, "cupy", repeats)
        print(f"  cupy: first round {row['cupy_first']:.4f} s, round {row['cupy_round']:.5f} s, "
              f"E-step {row['cupy_estep']:.5f} s", flush=True)
        row["cupy_fit"] = estimator_round(X, R, "cupy", max(1, repeats // 3))
        print(f"  cupy: per round of a pooled-em fit {row['cupy_fit']:.5f} s", flush=True)
    first, row["numba_round"], row["numba_estep"], numba_stats = kernel_round(X, R, "numba", max(1, repeats // 3))
    print(f"  numba: round {row['numba_round']:.4f} s (first, compiling: {first:.1f} s)", flush=True)
    if gpu:
        row["cupy_vs_numba"] = max_relative_difference(cupy_stats, numba_stats)
        print(f"  largest relative difference of the statistics, cupy against numba: {row['cupy_vs_numba']:.1e}")
    row["sklearn"] = sklearn_iteration(X, R, 1)
    print(f"  scikit-learn: iteration {row['sklearn']:.4f} s", flush=True)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--smoke", action="store_true")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    gpu = gpu_available()
    if gpu:
        import cupy
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        device = f"{name.decode() if isinstance(name, bytes) else name}, CuPy {cupy.__version__}"
    else:
        device = "no GPU (CuPy missing or sees none): CPU rows only"
    print(f"GPU: {device}; CPU: {os.cpu_count()} cores, {platform.processor() or platform.machine()}")
    if args.smoke:
        grid, repeats = [(5_000, 8, 4)], 2
    elif args.quick:
        grid, repeats = [(10 ** 6, 64, 64)], 6
    else:
        grid, repeats = [(10 ** 6, 64, 64), (10 ** 5, 32, 16)], 9
    rows = [measure(n, d, R, repeats, gpu) for n, d, R in grid]
    print("\nseconds per EM iteration, diagonal covariances, one client (float64; PyCave's in float32)")
    print(f"{'n':>8}{'d':>4}{'R':>4}{'cupy':>10}{'E-step':>10}{'cupy fit':>10}{'numba':>9}{'sklearn':>9}"
          f"{'PyCave':>9}{'PyCave/cupy':>12}{'numba/cupy':>11}{'sklearn/cupy':>13}{'sklearn/numba':>14}")
    nan = float("nan")
    for r in rows:
        cupy_round = r.get("cupy_round", nan)
        pycave = PYCAVE.get((r["n"], r["d"], r["R"]), (nan, None))[0]
        print(f"{r['n']:>8.0e}{r['d']:>4}{r['R']:>4}{cupy_round:>10.5f}{r.get('cupy_estep', nan):>10.5f}"
              f"{r.get('cupy_fit', nan):>10.5f}{r['numba_round']:>9.4f}{r['sklearn']:>9.4f}{pycave:>9.4f}"
              f"{pycave / cupy_round:>12.1f}{r['numba_round'] / cupy_round:>11.1f}{r['sklearn'] / cupy_round:>13.1f}"
              f"{r['sklearn'] / r['numba_round']:>14.1f}")
    print("PyCave: published, GeForce GTX 1080 Ti (borchero/pycave docs/sites/benchmark.rst), not measured here")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "cpu_count": os.cpu_count(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
