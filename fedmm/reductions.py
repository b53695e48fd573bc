"""Reductions the server makes over clients, and over a short last axis, compiled; each gives its numpy oracle's
numbers.

- :func:`column_medians`: the median over clients of every coordinate (:func:`fedmm.robust.client_median`; oracle
  ``np.median(values, axis=0)``). FedGrEM's server takes a median over clients of a (K, R, d) array several times a
  round (the noise scale, the variances' typical size, their deviations). numpy's way transposes the array into
  contiguous rows (40 MB at ``K = 10^5``) and partitions each at ``K // 2``: 80-94 ms a median there. Here one pass
  over the clients' rows, in their order, brackets the middle of every coordinate (Floyd & Rivest, *Commun. ACM*
  18, 1975: pivots chosen from a sample, so that only a few percent of the values lie between them), and a
  selection among those values alone finds the median; the same values as numpy's selection, so the same numbers.
- :func:`largest_magnitudes`: ``np.abs(a).max(axis=2)`` of a (K, R, p) array, without the temporary: numpy's
  reductions over a short last axis cost several times a pass (7% of a FedGrEM fit at ``K = 10^5``).
- :func:`largest_changes`: ``np.abs(a - b).max(axis=(1, 2))``, every client's largest parameter change a round,
  without the two (K, R, p) temporaries.
- :func:`fill_empty_medians`: in place, each client's empty components' values (a (K, R, s) array) set to the median
  over its other components (oracle ``np.nanmedian`` over the components), for FedGrEM's noise units
  (:func:`fedmm.algorithms.variances.held_variances`): numpy's way costs 0.4 s a round at ``K = 10^5`` where every
  client lacks a component.
- :func:`has_tiny`: ``((np.abs(a) < tiny) & (a != 0)).any()``, the data check's look for values too small to square
  (:func:`fedmm.data.FederatedData.from_input`), without three temporaries the size of the data: 1.0 s of a 5 s
  fit at ``d = 5000``, ``K = 100``.
"""

import numpy as np
from numba import njit

#: Fewer clients than this: numpy's selection (the bracket's sample would be too small to pay).
MIN_CLIENTS = 2048
#: Rows per tile of :func:`column_medians`'s pass.
TILE = 128


@njit(cache=True)
def _select(a, k, n):
    """In place: ``a[k]`` becomes the ``k``-th smallest of ``a[:n]``, with nothing larger before it and nothing
    smaller after it (Hoare's quickselect, median-of-three pivots)."""
    lo, hi = 0, n - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        if a[mid] < a[lo]:
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[hi] < a[mid]:
            a[hi], a[mid] = a[mid], a[hi]
        pivot, i, j = a[mid], lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while pivot < a[j]:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return


@njit(cache=True)
def _middle(a, n):
    """The median of ``a[:n]`` (reordered): the middle value, or the mean of the two middle ones, as
    ``np.median`` takes it."""
    h = n // 2
    _select(a, h, n)
    if n % 2:
        return a[h]
    low = a[0]
    for i in range(1, h):
        low = max(low, a[i])
    return 0.5 * (low + a[h])


@njit(cache=True)
def _brackets(values, ranks):
    """Per column of ``values`` (K, m), pivots ``(low, high)`` whose range likely holds the values of ranks
    ``ranks[0]..ranks[1]``, and how many values it should hold at most: order statistics of every ``step``-th row,
    ``s = K^(2/3)`` of them (the size that balances the sample's selection against the bracket's), four standard
    deviations of the sample's rank (``sqrt(s) / 2``) to either side."""
    K, m = values.shape
    step = max(int(K ** (1.0 / 3.0)), 1)
    s = (K + step - 1) // step
    gap = 2 * int(np.sqrt(s)) + 1
    r_low, r_high = max(ranks[0] * s // K - gap, 0), min(ranks[1] * s // K + gap, s - 1)
    sample, low, high = np.empty(s), np.empty(m), np.empty(m)
    for c in range(m):
        for i in range(s):
            sample[i] = values[i * step, c]
        _select(sample, r_low, s)
        low[c] = sample[r_low]
        _select(sample[r_low:], r_high - r_low, s - r_low)
        high[c] = sample[r_high]
    return low, high, 2 * (r_high - r_low + 1) * step + 64


@njit(cache=True)
def column_medians(values):
    """``np.median(values, axis=0)`` of finite ``values`` (K, m), C-ordered: one pass over the rows counts the
    values below each column's bracket (:func:`_brackets`) and keeps those in it; the middle ranks are then
    selected among the kept ones. A column whose middle the bracket missed (or that kept too many) is selected
    in full."""
    K, m = values.shape
    h = K // 2
    ranks = np.array([h - 1 + K % 2, h])
    low, high, capacity = _brackets(values, ranks)
    kept, below, count = np.empty((m, capacity + 1)), np.zeros(m, np.int64), np.zeros(m, np.int64)
    for k0 in range(0, K, TILE):    # a tile of rows stays in cache while each column's values are taken
        for c in range(m):
            bottom, top, n_below, n_kept, keep = low[c], high[c], below[c], count[c], kept[c]
            for k in range(k0, min(k0 + TILE, K)):
                x = values[k, c]
                n_below += x < bottom
                keep[n_kept] = x    # written always, kept when in the bracket: no branch
                n_kept = min(n_kept + ((bottom <= x) & (x <= top)), capacity)
            below[c], count[c] = n_below, n_kept
    out, column = np.empty(m), np.empty(K)
    for c in range(m):
        n_kept = count[c]
        if below[c] <= ranks[0] and ranks[1] < below[c] + n_kept and n_kept < capacity:
            a = kept[c]
            _select(a, h - below[c], n_kept)
            top = a[h - below[c]]
            if K % 2:
                out[c] = top
            else:  # the largest value below the middle one: among the kept values before it
                lower = a[0]   # there is one: below[c] <= h - 1
                for i in range(1, h - below[c]):
                    lower = max(lower, a[i])
                out[c] = 0.5 * (lower + top)
        else:
            for k in range(K):
                column[k] = values[k, c]
            out[c] = _middle(column, K)
    return out


@njit(cache=True)
def largest_magnitudes(a):
    """``np.abs(a).max(axis=2)`` of ``a`` (K, R, p), NaN where a row holds one: the same numbers, in one pass."""
    K, R, p = a.shape
    out = np.empty((K, R))
    for k in range(K):
        for r in range(R):
            largest = abs(a[k, r, 0])
            for j in range(1, p):
                v = abs(a[k, r, j])
                if v > largest or np.isnan(v):    # once NaN, nothing is larger
                    largest = v
            out[k, r] = largest
    return out


@njit(cache=True)
def largest_changes(a, b):
    """``np.abs(a - b).max(axis=(1, 2))`` of ``a``, ``b`` (K, R, p), NaN where a client's holds one: the same
    numbers, in one pass."""
    K, R, p = a.shape
    out = np.empty(K)
    for k in range(K):
        largest = abs(a[k, 0, 0] - b[k, 0, 0])
        for r in range(R):
            for j in range(p):
                v = abs(a[k, r, j] - b[k, r, j])
                if v > largest or np.isnan(v):    # once NaN, nothing is larger
                    largest = v
        out[k] = largest
    return out


@njit(cache=True)
def fill_empty_medians(values, empty):
    """In place: ``values[k, r, j]`` for every ``empty[k, r]`` becomes the median of ``values[k, r', j]`` over the
    components ``r'`` of client ``k`` that are not empty (numpy's ``nanmedian`` of them); clients with every
    component empty, or none, are left as they are."""
    K, R, s = values.shape
    buffer = np.empty(R, dtype=values.dtype)
    for k in range(K):
        n_held = 0
        for r in range(R):
            n_held += not empty[k, r]
        if n_held == R or n_held == 0:
            continue
        for j in range(s):
            n = 0
            for r in range(R):
                if not empty[k, r]:
                    buffer[n] = values[k, r, j]
                    n += 1
            middle = _middle(buffer, n)
            for r in range(R):
                if empty[k, r]:
                    values[k, r, j] = middle


@njit(cache=True)
def has_tiny(a, tiny):
    """``((np.abs(a) < tiny) & (a != 0)).any()`` of the 2-D ``a``, in one pass that stops at the first such value."""
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            v = abs(a[i, j])
            if v < tiny and v != 0:
                return True
    return False
