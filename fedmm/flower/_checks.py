"""What a valid reply looks like: the server's checks of one client's arrays (:mod:`fedmm.flower.server`)."""

import numpy as np


class Gone(str):
    """Why a node is not heard, when the SuperLink says it is gone (a reason, told apart from the others)."""


#: Queries whose replies are computed from the client's own data, so no two honest clients repeat each other's.
_OWN_DATA = ("hello", "step", "local")
#: Replies to such a query that agree to this relative precision in every array are copies (:func:`_copies`): the
#: format checks allow rounding at 1e-6 themselves (proportions, statistics' sizes), and no two clients' own rows
#: give sums or estimates that close.
COPY_RTOL = 1e-6


def _arrays_ok(values, shapes):
    """Why ``values`` are not exactly the float64 arrays ``shapes`` names, all finite (None when they are)."""
    if set(values) != set(shapes):
        return f"arrays {sorted(values)}, expected {sorted(shapes)}"
    for key, shape in shapes.items():
        value = values[key]
        if value.dtype != np.float64:
            return f"{key} has dtype {value.dtype}, expected float64"
        if value.shape != tuple(shape):
            return f"{key} has shape {value.shape}, expected {tuple(shape)}"
        if not np.all(np.isfinite(value)):
            return f"{key} has non-finite values"
    return None


def _copies(replies):
    """``{k: j}`` for each reply ``replies[k]`` (in the order they arrived) that repeats an earlier one, ``j``'s: in
    every array, no farther from it than :data:`COPY_RTOL` times the two arrays' largest absolute value.

    A reply is compared only with those whose fingerprint (the sum over arrays of ``log1p`` of the largest absolute
    value) is within ``2 COPY_RTOL`` per array of its own, as a copy's is: a sort rather than every pair."""
    if not replies:
        return {}
    index = list(replies)
    keys = sorted(replies[index[0]])
    largest = np.array([[np.abs(replies[k][key]).max(initial=0.0) for key in keys] for k in index])
    fingerprint = np.log1p(largest).sum(axis=1)
    order = np.argsort(fingerprint, kind="stable")
    ranked, window = fingerprint[order], 2 * COPY_RTOL * len(keys)
    copies = {}
    for i, k in enumerate(index):
        low = np.searchsorted(ranked, fingerprint[i] - window, "left")
        high = np.searchsorted(ranked, fingerprint[i] + window, "right")
        for j in sorted(j for j in order[low:high] if j < i):   # the earliest arrival it repeats
            if all(np.abs(replies[k][key] - replies[index[j]][key]).max(initial=0.0)
                   <= COPY_RTOL * largest[[i, j], a].max() for a, key in enumerate(keys)):
                copies[k] = index[j]
                break
    return copies


#: The largest size a client may claim: sizes travel as float64, which holds every integer only up to 2**53 (a
#: larger claim is no count the server can check, 1e300 not even an int64).
MAX_SIZE = 2 ** 53


def _size_ok(n):
    return None if 1 <= n <= MAX_SIZE and float(n).is_integer() else \
        f"n = {n:g} is not a positive integer up to 2**53"


def _simplex_ok(weights):
    if np.any(weights < 0) or np.any(np.abs(weights.sum(axis=-1) - 1.0) > 1e-6):
        return "mixing proportions are not on the simplex"
    return None


def _positive(values, name):
    return None if np.all(values > 0) else f"{name} has values <= 0"


def _rounds_ok(part, shapes, max_iter):
    """Why one run's reply to the query ``local`` (:meth:`fedmm.flower.server.FlowerClients.local_runs`) is not
    parameters of ``shapes``, a number of rounds from 1 to ``max_iter``, and two traces that long (None when it
    is)."""
    n_iter = np.ravel(np.asarray(part.get("n_iter", np.zeros(0)), dtype=float))
    T = n_iter[0] if n_iter.size == 1 else np.nan
    if not (np.isfinite(T) and T == round(T) and 1 <= T <= max_iter):
        return f"n_iter = {n_iter.tolist()}, not a number of rounds from 1 to {max_iter}"
    rounds = {"n_iter": (1,), "converged": (1,), "loglik": (1,), "trace": (int(T),), "moved": (int(T),)}
    return _arrays_ok(part, {**shapes, **rounds})
