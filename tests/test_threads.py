"""Threads: small fits start none, the user's caps hold, workers get their share (fedmm.threads)."""

import os
import subprocess
import sys
import threading

import numba
import numpy as np
import pytest
from joblib import Parallel, cpu_count, delayed

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression, threads
from fedmm.kernels import get_kernels
from fedmm.simulate import make_federated_gmm, make_federated_mor
from fedmm.studies import cluster

#: Every test here runs at fedmm's own threshold of work for threads, the subject of most of them (conftest.py).
pytestmark = pytest.mark.own_threshold

needs_two = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="Numba has one thread here")


def _big_estep():
    """One E-step over 20,000 samples in 134 clients (R = 5, d = 10): a million units of work."""
    X, _ = make_federated_gmm(n_clients=134, n_samples=150, random_state=0)
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in X])])
    K, R, d = len(X), 5, X[0].shape[1]
    rng = np.random.RandomState(0)
    return lambda: get_kernels("numba").gaussian_estep(np.vstack(X), offsets, np.full((K, R), 1.0 / R),
                                                       rng.standard_normal((K, R, d)), np.ones((K, R, 1)), "total")


def test_a_default_fit_on_small_data_starts_no_thread():
    """The README's quick start, its predictions and a personalized client, and a mixture of regressions:
    every kernel below the work that pays for threads runs its serial copy, so on a busy machine no
    thread waits at a barrier (issue 41: the same fit took 39 s next to other processes)."""
    before = threads.parallel_launches()
    X, _ = make_federated_gmm(n_clients=10, n_samples=150, h=0.5, outlier_clients=[9], random_state=0)
    gm = FederatedGaussianMixture(n_components=5, n_init=3, random_state=0).fit(X)
    gm.predict(X)
    gm.personalize(X[0]).predict(X[0])
    X, y, _ = make_federated_mor(n_clients=6, n_samples=100, random_state=0)
    mr = FederatedMixtureRegression(n_components=3, random_state=0).fit(X, y)
    mr.predict(X), mr.score(X, y)
    assert threads.parallel_launches() == before


@needs_two
@pytest.mark.parallel_copies
def test_large_work_runs_in_parallel_unless_capped_or_the_cores_are_busy(monkeypatch):
    estep = _big_estep()
    monkeypatch.setattr(threads, "_idle_cores", lambda: 64)
    before = threads.parallel_launches()
    estep()
    assert threads.parallel_launches() == before + 1
    monkeypatch.setattr(threads, "_idle_cores", lambda: 1)  # every other core taken right now
    estep()
    assert threads.parallel_launches() == before + 1
    monkeypatch.setattr(threads, "_idle_cores", lambda: 64)
    with threads.limit(1):
        estep()
    assert threads.parallel_launches() == before + 1
    threads.set_num_threads(1)
    try:
        estep()
        assert threads.get_num_threads() == 1
    finally:
        threads.set_num_threads(None)
    assert threads.parallel_launches() == before + 1


def test_a_limit_holds_in_its_own_thread_only():
    seen, default = {}, threads.get_num_threads()
    with threads.limit(1):
        worker = threading.Thread(target=lambda: seen.update(other=threads.get_num_threads()))
        worker.start()
        worker.join()
        seen["here"] = threads.get_num_threads()
    assert seen == {"here": 1, "other": default}


def test_omp_num_threads_caps_the_default(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1,1")
    assert threads.get_num_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")
    assert threads.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads.set_num_threads(numba.config.NUMBA_NUM_THREADS)  # the user's call wins over the environment
    try:
        assert threads.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    finally:
        threads.set_num_threads(None)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_a_thread_count_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="positive integer"):
        threads.set_num_threads(bad)
    with pytest.raises(ValueError, match="positive integer"):
        with threads.limit(bad):
            pass


def test_joblib_workers_get_their_share_of_the_cores():
    """``fedmm demo`` and the studies run their fits in joblib's processes: each gets cores // workers."""
    with cluster("loky"):
        shares = Parallel(n_jobs=2)(delayed(threads.get_num_threads)() for _ in range(4))
    assert shares == [max(1, cpu_count() // 2)] * 4


_POOL = """
import os, numba
from fedmm import threads
start, seen = numba.get_num_threads, []
def get_num_threads():  # what the OpenMP runtime reads as it loads
    seen.append((os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY")))
    return start()
numba.get_num_threads = get_num_threads
threads._start_pool()
print(*seen[0], os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY"))
"""


@needs_two
@pytest.mark.parametrize("user, expected", [({}, "3000 PASSIVE None None"),
                                            ({"OMP_WAIT_POLICY": "ACTIVE"}, "None ACTIVE None ACTIVE")])
def test_the_wait_policy_is_seen_by_the_thread_pool_only(user, expected):
    """fedmm starts Numba's pool with a short spin in the environment and takes it out again: other
    libraries and child processes never see it, and a policy the user set is left alone."""
    env = {k: v for k, v in os.environ.items() if k not in threads.WAIT_POLICY}
    out = subprocess.run([sys.executable, "-c", _POOL], env={**env, **user}, capture_output=True, text=True,
                         check=True).stdout.split()
    assert " ".join(out) == expected


def test_idle_cores_are_counted_from_the_runnable_threads(monkeypatch, tmp_path):
    """Linux's /proc/loadavg: '0.50 0.40 0.30 3/250 12345' is three runnable threads, this one included; the
    estimate follows what it reads halfway each call."""
    import builtins
    real_open = builtins.open

    def fake(runnable):
        path = tmp_path / "loadavg"
        path.write_text(f"0.50 0.40 0.30 {runnable}/250 12345\n")
        monkeypatch.setattr(builtins, "open", lambda f, *a, **k: real_open(path if f == "/proc/loadavg" else f, *a, **k))

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(threads, "_others", 0.0)
    fake(1)
    assert threads._idle_cores() == 4
    fake(3)  # two other threads, for an instant (estimate 1) and still (1.5)
    assert [threads._idle_cores(), threads._idle_cores()] == [3, 3]
    assert [threads._idle_cores() for _ in range(4)][-1] == 2   # and for good (estimate 1.97)
    fake(40)
    assert threads._idle_cores() == 1
