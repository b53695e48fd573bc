"""fedmm on a busy machine (issue 41): its defaults against one thread, quiet and under load, in one run.

Starts as many CPU-bound background processes as this process may use cores (stopped at the end, by
their ids), and times, each in a fresh process so that its thread settings hold from the start:

- ``quick-start``: the README's fit, ``FederatedGaussianMixture(n_components=5, random_state=1)`` on 10
  clients of 150 samples;
- ``clients``: a FedGrEM fit of K = 1,000 clients of 50 samples (``bench_clients.py``'s data);
- ``round``: one pooled EM round (E-step and M-step) on n = 10^6 samples, d = 10, R = 5, spherical
  (``bench_kernels.py``'s round);

with fedmm's defaults and with ``NUMBA_NUM_THREADS=1``, quiet and then under load. The target: the
defaults under load at most 1.5x the one-thread run under the same load. The full form also checks that
the quiet speed is kept: the pooled round at least 15x scikit-learn's EM iteration and at most 1.5x one
pass over the data (``X.sum(axis=0)``), and a FedGrEM fit of K = 10,000 clients of 50 in at most 20 s.
Exits non-zero when a target is missed. The quick form (in CI) times the quick-start fit, K = 200 and
n = 10^5, and allows 3x under load: short timings on a shared machine vary 2x for the same code.

``--crossover`` times the serial and parallel copies of two kernels (the E-step and the central update's
loop) across sizes, quiet and under load: the measurement behind ``fedmm.threads.MIN_PARALLEL_WORK``.

    python validation/bench_load.py [--quick] [--crossover]
"""

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ONE_THREAD = {"NUMBA_NUM_THREADS": "1"}


@contextmanager
def background_load(n_processes):
    """``n_processes`` busy loops in other processes for the duration of the block."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n_processes)]
    try:
        time.sleep(0.5)  # let them start
        yield [p.pid for p in spinners]
    finally:
        for p in spinners:
            p.kill()
        for p in spinners:
            p.wait()


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def case_quick_start(quick):
    from fedmm import FederatedGaussianMixture
    from fedmm.simulate import make_federated_gmm
    X, _ = make_federated_gmm(n_clients=10, n_samples=150, h=0.5, outlier_clients=[9], random_state=0)
    fit = lambda: FederatedGaussianMixture(n_components=5, random_state=1).fit(X)  # noqa: E731
    fit()  # compile or load the kernels
    return {"seconds": median_time(fit, 3)}


def case_clients(quick, K=None):
    from fedmm import FederatedGaussianMixture
    sys.path.insert(0, str(HERE))
    from bench_clients import clients
    X = clients(K or (200 if quick else 1000))
    fit = lambda: FederatedGaussianMixture(5, method="fedgrem", random_state=0).fit(X)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit()
        return {"seconds": median_time(fit, 3)}


def case_many_clients(quick):
    """K = 10,000 clients of 50, one fit as ``bench_clients.py`` times it (quiet-machine target)."""
    return case_clients(quick, K=10_000)


def case_round(quick):
    sys.path.insert(0, str(HERE))
    from bench_kernels import R, em_round_time, sklearn_iteration_time
    n, d = (10 ** 5 if quick else 10 ** 6), 10
    X = np.random.RandomState(0).standard_normal((n, d)) + 3.0 * np.random.RandomState(1).randint(0, R, (n, 1))
    # A round is milliseconds: the median of enough of them to span about a second of the scheduler's
    # sharing, not of three that one time slice decides.
    repeats = 200 if quick else 40
    out = {"seconds": em_round_time(X, "numba", repeats, timer=median_time)}
    if os.environ.get("BENCH_LOAD_REFERENCES"):
        out["sklearn"] = sklearn_iteration_time(X, 3)
        out["memory_pass"] = median_time(lambda: X.sum(axis=0), repeats)
    return out


CASES = {"quick-start": case_quick_start, "clients": case_clients, "round": case_round,
         "many-clients": case_many_clients}


def run_case(name, quick, env=None):
    """One case in a fresh process with ``env`` added to this one's environment: its JSON result."""
    command = [sys.executable, __file__, "--case", name] + (["--quick"] if quick else [])
    result = subprocess.run(command, env={**os.environ, **(env or {})}, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def timings(quick, cores):
    """Every case with the defaults and with one thread, quiet and under load: {(case, load, threads): s}."""
    table = {}
    names = ["quick-start", "clients", "round"]
    for load in ("quiet", "load"):
        with (background_load(cores) if load == "load" else _nothing()):
            for name in names:
                for threads, env in (("defaults", {}), ("1 thread", ONE_THREAD)):
                    table[name, load, threads] = run_case(name, quick, env)["seconds"]
    return table


@contextmanager
def _nothing():
    yield


def crossover(cores, sizes=(1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 200_000)):
    """Serial and parallel copies of the E-step and of the central update's loop, by work, quiet and
    under load; prints one row per size and returns the rows."""
    from fedmm import threads
    from fedmm.algorithms.central import _irls_loop
    from fedmm.kernels import _compiled, gaussian
    rng = np.random.RandomState(0)
    R, d = 5, 10
    rows = []
    threads._start_pool()  # with fedmm's wait policy, as a fit starts it
    for load in ("quiet", "load"):
        with (background_load(cores) if load == "load" else _nothing()):
            for n in sizes:
                X = rng.standard_normal((n, d))
                offsets = np.append(np.arange(0, n, 150), n)  # clients of 150 samples, as the quick start's
                starts, ends, owners = _compiled._pieces(offsets)
                C = len(offsets) - 1
                means = rng.standard_normal((C, R, d))
                const, precision, layout = gaussian._gaussian_constants(np.full((C, R), 1.0 / R), means,
                                                                        np.ones((C, R, 1)))
                estep = (X, starts, ends, owners, const, means, precision, layout, 2)
                K = n  # the central update: K R p parameters, the E-step's work per iteration
                theta = rng.standard_normal((R, K, d))
                weights = np.ones((R, K))
                irls = (theta, weights * 50, weights, weights, 1.0, theta.mean(axis=1), 1e-300, 12)
                row = {"load": load, "work": n * R * d}
                for label, kernel, args in (("estep", gaussian._gaussian_pass, estep), ("irls", _irls_loop, irls)):
                    repeats = max(5, int(3e6 // (n * R * d) * 20))
                    for copy in ("serial", "parallel"):
                        fn = getattr(kernel, copy)
                        fn(*args)
                        row[f"{label} {copy}"] = median_time(lambda: fn(*args), repeats)
                rows.append(row)
                print(f"{load:5s} work {n * R * d:>10,d}  E-step serial {row['estep serial'] * 1e3:7.3f} ms, "
                      f"parallel {row['estep parallel'] * 1e3:7.3f} ms ({row['estep serial'] / row['estep parallel']:.2f}x)"
                      f"  central loop serial {row['irls serial'] * 1e3:7.3f} ms, parallel "
                      f"{row['irls parallel'] * 1e3:7.3f} ms ({row['irls serial'] / row['irls parallel']:.2f}x)",
                      flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--crossover", action="store_true")
    parser.add_argument("--case", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(CASES[args.case](args.quick)))
        return 0
    from joblib import cpu_count

    from fedmm.threads import MIN_PARALLEL_WORK
    cores = cpu_count()
    if args.crossover:
        print(f"{cores} cores; fedmm's MIN_PARALLEL_WORK = {MIN_PARALLEL_WORK:,}")
        crossover(cores)
        return 0

    print(f"{cores} cores, {cores} busy background processes under load; median seconds, each case in a fresh "
          f"process")
    table = timings(args.quick, cores)
    # Milliseconds of the same serial code next to two busy processes vary 2x from one process to the next
    # (one round of the quick form: 3.6 to 7.6 ms, no parallel region in either): the quick form allows 3x,
    # still far below the 150x of the pathology it guards against.
    bound = 3.0 if args.quick else 1.5
    checks = []
    print(f"\n| case | quiet, defaults | quiet, 1 thread | load, defaults | load, 1 thread | load: defaults / 1 thread |")
    print("|---|---|---|---|---|---|")
    for name in ("quick-start", "clients", "round"):
        cells = [table[name, load, threads] for load in ("quiet", "load") for threads in ("defaults", "1 thread")]
        ratio = cells[2] / cells[3]
        print(f"| {name} | " + " | ".join(f"{c:.4f}" for c in cells) + f" | {ratio:.2f} |")
        checks.append((f"{name}: defaults under load {ratio:.2f}x one thread <= {bound:g}", ratio <= bound))
    if not args.quick:
        reference = run_case("round", False, {"BENCH_LOAD_REFERENCES": "1"})
        speedup, memory = reference["sklearn"] / reference["seconds"], reference["seconds"] / reference["memory_pass"]
        many = run_case("many-clients", False)["seconds"]
        print(f"\nquiet: pooled round {reference['seconds']:.4f} s, scikit-learn's iteration "
              f"{reference['sklearn']:.4f} s, one memory pass {reference['memory_pass']:.4f} s; "
              f"K = 10,000 FedGrEM fit {many:.2f} s")
        checks += [(f"pooled round {speedup:.1f}x scikit-learn's iteration >= 15", speedup >= 15),
                   (f"pooled round {memory:.2f}x a memory pass <= 1.5", memory <= 1.5),
                   (f"K = 10,000 x 50 FedGrEM fit {many:.1f} s <= 20 s", many <= 20)]
    print()
    for text, ok in checks:
        print(("met:    " if ok else "MISSED: ") + text)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
