"""How many threads fedmm's compiled kernels use, and when they use more than one.

Numba runs a ``prange`` loop on a pool of threads that meet at a barrier when the loop ends. On a
machine whose cores are busy with other work, a thread that is not running holds up the others,
and OpenMP's threads spin while they wait, taking the cores the late thread needs: a fit of small
data that takes 0.2 s on a quiet machine took 39 s next to other processes. Three rules keep
fedmm's speed where users run it (``docs/performance.md``, *Threads and busy machines*):

1. **Work too small to pay for threads runs on one.** Every parallel kernel is compiled twice
   (:func:`parallel_kernel`), and the serial copy runs below :data:`MIN_PARALLEL_WORK` units of work
   (a sample times a component times a coordinate, or what a kernel counts as alike): below it a
   parallel region cannot pay for itself when the machine is busy (``validation/bench_load.py``
   measures the crossover). A small fit starts no thread at all. Larger work uses no more threads
   than the machine has idle cores at that instant (Linux).
2. **Waiting threads sleep soon.** Numba's thread pool is started by fedmm, and while its OpenMP
   runtime loads, the environment asks it to spin at most briefly (:data:`WAIT_POLICY`) before it
   sleeps; the variables are restored at once, so no other library in the process sees them. A
   variable the user set wins.
3. **Workers share the cores.** fedmm's kernels use at most ``OMP_NUM_THREADS`` threads where it is
   set, the convention the ecosystem's worker pools follow: joblib's processes (studies and
   ``fedmm demo``) get ``cores // workers``, Dask's workers one, Ray's tasks and actors (the Flower
   simulation's clients) the cores they reserved.

The user's control is :func:`set_num_threads` (the process) and :func:`limit` (a block of code in one
thread), or ``OMP_NUM_THREADS`` / ``NUMBA_NUM_THREADS`` in the environment (the second before the first
parallel kernel runs: it sizes Numba's pool).
"""

import os
import threading
import types
from contextlib import contextmanager

import numba

__all__ = ["MIN_PARALLEL_WORK", "WAIT_POLICY", "get_num_threads", "set_num_threads", "limit", "parallel_kernel",
           "parallel_launches"]

#: Units of work (samples x components x coordinates in the E-step) below which a kernel runs serially.
#: With two threads, parallel regions of this size still beat the serial kernel by 1.1-1.4x on a
#: quiet machine and tie it under load (``validation/bench_load.py --crossover``).
MIN_PARALLEL_WORK = 250_000
#: The OpenMP environment fedmm's thread pool starts with, unless the user set any of these: GNU
#: libgomp (pip's Numba on Linux) spins about 30 us, not 3 ms, before it sleeps; other runtimes sleep
#: at once.
WAIT_POLICY = {"GOMP_SPINCOUNT": "3000", "OMP_WAIT_POLICY": "PASSIVE"}

_process_threads = None          # set_num_threads; None: Numba's pool size
_local = threading.local()       # limit(): a thread's own cap
_pool_lock = threading.Lock()
_pool_started = False
_launches = 0                    # parallel_launches()
_others = 0.0                    # _idle_cores(): other runnable threads, a running estimate


def get_num_threads():
    """The threads fedmm's parallel kernels may use in the calling thread.

    The cap of the innermost :func:`limit` in this thread, else :func:`set_num_threads`'s value, else
    ``OMP_NUM_THREADS`` (what joblib, Dask and Ray set in their workers, and what scikit-learn's OpenMP
    code reads), else Numba's pool size (``NUMBA_NUM_THREADS``, by default the cores); never more than
    the pool.
    """
    cap = getattr(_local, "threads", None) or _process_threads or _omp_num_threads() or numba.config.NUMBA_NUM_THREADS
    return max(1, min(cap, numba.config.NUMBA_NUM_THREADS))


def _omp_num_threads():
    """The first level of ``OMP_NUM_THREADS`` (``"4"`` or ``"4,2"``: 4), None when unset or not a count."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def _check_threads(n_threads):
    if n_threads is None:
        return None
    if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
        raise ValueError(f"n_threads must be a positive integer or None, got {n_threads!r}.")
    return n_threads


def set_num_threads(n_threads):
    """Use at most ``n_threads`` threads in fedmm's kernels, in every thread of this process.

    ``None`` restores the default, Numba's pool size. Numba's own pool cannot grow after it started:
    to use more threads than ``NUMBA_NUM_THREADS``, set that variable before Python starts.
    """
    global _process_threads
    _process_threads = _check_threads(n_threads)


@contextmanager
def limit(n_threads):
    """Within the block, fedmm's kernels in the calling thread use at most ``n_threads`` threads.

    ``None`` keeps the current cap.
    """
    previous = getattr(_local, "threads", None)
    _local.threads = _check_threads(n_threads) or previous
    try:
        yield
    finally:
        _local.threads = previous


def parallel_launches():
    """How many times a fedmm kernel has run on more than one thread in this process."""
    return _launches


def _idle_cores():
    """The machine's cores that other threads do not keep busy, at least one.

    Linux's ``/proc/loadavg`` counts the threads running or waiting to run at this instant (its fourth
    field), the calling one included. Each call halves the distance of a running estimate to what it
    reads, so a thread that runs for an instant does not make a kernel serial and other processes that
    keep the cores busy do within a call or two. Where the file is missing (macOS, Windows) every core
    counts as idle.
    """
    global _others
    cores = os.cpu_count() or 1
    try:
        with open("/proc/loadavg", "rb") as f:
            runnable = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return cores
    _others = (_others + runnable - 1) / 2
    return max(1, cores - int(_others + 0.4))  # rounded, half a thread (one instant's) ignored


def _start_pool():
    """Start Numba's thread pool once, with :data:`WAIT_POLICY` in the environment while its threading
    layer (and so the OpenMP runtime) loads: libgomp reads it then, and only then."""
    global _pool_started
    with _pool_lock:
        if _pool_started:
            return
        user_set = any(name in os.environ for name in WAIT_POLICY)
        saved = {name: os.environ.get(name) for name in WAIT_POLICY}
        if not user_set:
            os.environ.update(WAIT_POLICY)
        try:
            numba.get_num_threads()  # loads the threading layer and starts its threads
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        _pool_started = True


class ParallelKernel:
    """A ``prange`` kernel compiled twice, called with the work it is about to do and the iterations of
    its ``prange`` loop: ``kernel(work, tasks, *args)`` runs the serial copy below
    :data:`MIN_PARALLEL_WORK`, for a single task or with one thread allowed, and the parallel one on at
    most :func:`get_num_threads` threads (and ``tasks``) otherwise. Both give the same results (the serial
    copy is the same code, ``prange`` read as ``range``)."""

    def __init__(self, py_func, options):
        self.parallel = numba.njit(parallel=_PRANGE_ONLY, cache=True, **options)(py_func)
        self.serial = numba.njit(cache=True, **options)(_renamed(py_func, "_serial"))
        self.__doc__, self.__name__, self.__wrapped__ = py_func.__doc__, py_func.__name__, py_func

    def __call__(self, work, tasks, *args):
        threads = min(get_num_threads(), tasks, _idle_cores()) if work >= MIN_PARALLEL_WORK else 1
        if threads <= 1:
            return self.serial(*args)
        global _launches
        _start_pool()
        previous = numba.get_num_threads()
        numba.set_num_threads(threads)
        with _pool_lock:
            _launches += 1
        try:
            return self.parallel(*args)
        finally:
            numba.set_num_threads(previous)


#: Only the explicit ``prange`` loop runs in parallel: Numba would otherwise make a parallel region of
#: every array expression too (each ``np.zeros`` a region of its own, five per E-step, each a barrier).
_PRANGE_ONLY = {"prange": True, "comprehension": False, "reduction": False, "inplace_binop": False,
                "setitem": False, "numpy": False, "stencil": False, "fusion": False}


def _renamed(py_func, suffix):
    """A copy of ``py_func`` whose qualified name ends in ``suffix``: Numba's disk cache is keyed by the
    name, so the serial and parallel compilations of one function need two."""
    copy = types.FunctionType(py_func.__code__, py_func.__globals__, py_func.__name__ + suffix,
                              py_func.__defaults__, py_func.__closure__)
    copy.__qualname__ = py_func.__qualname__ + suffix
    copy.__module__ = py_func.__module__
    return copy


def parallel_kernel(**options):
    """Decorator: compile a ``prange`` kernel as a :class:`ParallelKernel` (``options``: Numba's, e.g.
    ``fastmath``; both copies are cached on disk)."""
    return lambda py_func: ParallelKernel(py_func, options)
