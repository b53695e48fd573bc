"""Statistics over clients that no minority of them decides, and each client's own seeds and folds.

Wherever clients vote (held-out scores, the trimmed pooled start, the consensus of medians) fedmm leaves
out a fraction :data:`TRIM` of them or takes medians, so that outlier clients cannot decide; every
client deals its rows into folds from its own seed (:func:`client_fold`), so it deals alone.
"""

import numpy as np

from .reductions import MIN_CLIENTS, column_medians

__all__ = ["TRIM", "SIZE_CAP", "trusted_sizes", "first_best", "best_few", "client_median", "kept_clients",
           "client_seeds", "client_fold", "client_folds", "fold_sizes", "trimmed_mean", "paired_differences",
           "one_standard_error"]

#: Fraction of clients left out wherever clients vote (held-out scores, the trimmed pooled start), so
#: that up to this fraction of outlier clients cannot decide.
TRIM = 0.2

#: The most a robust method counts any client, in multiples of the median client's size
#: (:func:`trusted_sizes`).
SIZE_CAP = 4.0


def trusted_sizes(n_k):
    """Claimed sizes capped at :data:`SIZE_CAP` times their median: what a robust server counts a client by.

    A size is a claim (``docs/threat-model.md``): a party that says it holds a million samples would
    otherwise pull on the centre as a thousand honest clients do. Capped at ``SIZE_CAP`` median clients,
    one party pulls as hard as ``sqrt(SIZE_CAP) = 2`` median ones at most (FedGrEM's pull is
    ``sqrt(n_k) lambda``), so a third of the clients, the theory's limit, cannot outpull the rest.
    Honest clients larger than that still fit their own data by their full size; only their weight in
    what is shared is capped.
    """
    n_k = np.asarray(n_k, dtype=float)
    return np.minimum(n_k, SIZE_CAP * np.median(n_k))


def first_best(scores, axis=0):
    """Index of the first highest score along ``axis``, scores within ``1e-9`` (relative) of the highest
    counting as ties.

    Starts that reach the same optimum, labelled differently, score equal up to rounding, and rounding
    depends on the data's units; a tie keeps the earlier start, so the choice, and with it the labels,
    follows a change of units.
    """
    scores = np.asarray(scores, dtype=float)
    top = scores.max(axis=axis, keepdims=True)
    return np.argmax(scores >= top - 1e-9 * (1.0 + np.abs(top)), axis=axis)


def best_few(scores, m):
    """Indices of the ``m`` highest of the 1-d ``scores``, best first, each by :func:`first_best` among those
    left (ties keep the earlier)."""
    scores = np.array(scores, dtype=float)
    chosen = []
    for _ in range(min(m, scores.size)):
        chosen.append(int(first_best(scores)))
        scores[chosen[-1]] = -np.inf
    return chosen


def client_median(values):
    """``np.median(values, axis=0)`` of finite values, the same numbers, for thousands of clients in a few
    partitions' time.

    The server takes a median over clients every round (:func:`fedmm.algorithms.fedgrem.noise_scale`);
    numpy's partitions a strided axis at two positions, about 5 ms for (10,000, 5, 10), a third of a
    FedGrEM round there. Here: one partition of contiguous rows at ``K // 2``, and for even ``K`` the
    largest value below it; from :data:`fedmm.reductions.MIN_CLIENTS` float clients on, one compiled
    pass over the rows as they are (:func:`fedmm.reductions.column_medians`).
    """
    values = np.asarray(values)
    K = len(values)
    if K >= MIN_CLIENTS and values.dtype == np.float64 and values.ndim > 1:
        return column_medians(np.ascontiguousarray(values.reshape(K, -1))).reshape(values.shape[1:])
    rows = np.ascontiguousarray(values.reshape(K, -1).T)
    h = K // 2
    part = np.partition(rows, h, axis=1)
    median = part[:, h] if K % 2 else 0.5 * (part[:, :h].max(axis=1) + part[:, h])
    return median.reshape(values.shape[1:])


def kept_clients(values, trim):
    """Indices of the clients left after leaving out the ``floor(trim K)`` with the lowest ``values``."""
    values = np.asarray(values, dtype=float)
    return np.argsort(values, kind="stable")[int(np.floor(trim * len(values))):]


def client_seeds(random_state, size):
    """A seed for each of ``size`` clients, drawn by the server from ``random_state``.

    A seed per client rather than one generator passed from client to client: what a client draws
    (its start, its folds) then depends on its own data and seed only, as it must when the clients
    are separate parties (:mod:`fedmm.flower`), and the same fit gives the same draws in this process.
    """
    return random_state.randint(np.iinfo(np.int32).max, size=size)


def client_fold(n, n_folds, seed):
    """A fold index for each of a client's ``n`` samples, dealt at random from the client's own ``seed``,
    folds as even as possible (:func:`fold_sizes`). A client with one sample keeps it out of every
    fold (index -1), so that no fold leaves it without training data."""
    if n < 2:
        return np.full(n, -1)
    return np.random.RandomState(seed).permutation(np.arange(n) % n_folds)


def client_folds(n_samples, n_folds, random_state):
    """Every client's :func:`client_fold`, from seeds drawn from ``random_state`` (:func:`client_seeds`)."""
    return [client_fold(n, n_folds, seed) for n, seed in zip(n_samples, client_seeds(random_state, len(n_samples)))]


def fold_sizes(n_samples, n_folds, fold):
    """(K,) how many samples each client's :func:`client_fold` deals into ``fold``: known to the server
    from the clients' sizes alone."""
    n = np.asarray(n_samples)
    return np.where(n > 1, n // n_folds + (fold < n % n_folds), 0)


def trimmed_mean(values, trim):
    """Mean of ``values`` without the ``floor(trim * len)`` lowest."""
    return float(np.asarray(values, dtype=float)[kept_clients(values, trim)].mean())


def paired_differences(client_scores, reference, trim):
    """Every candidate's held-out score minus the ``reference`` candidate's, paired by client over the
    clients whose ``reference`` scores its trimmed mean keeps: ``(mean, standard error)``, arrays of one
    entry per candidate (standard errors 0 with fewer than two clients)."""
    kept = kept_clients(client_scores[reference], trim)
    diff = client_scores[:, kept] - client_scores[reference, kept]
    se = diff.std(axis=1, ddof=1) / np.sqrt(len(kept)) if len(kept) > 1 else np.zeros(len(diff))
    return diff.mean(axis=1), se


def one_standard_error(client_scores, trim):
    """Index of the first candidate not significantly worse than the best (the one-standard-error rule).

    Candidates are ordered from less pooling to more. Differences to the best
    are paired by client, over the clients the best one's trimmed mean keeps
    (:func:`paired_differences`); a candidate is within one standard error when
    its mean difference is at least ``-sd / sqrt(n)``. The rule
    leans towards less pooling, the robust side: pooling must earn its bias
    by a held-out gain larger than the noise of the comparison.
    """
    best = int(np.argmax([trimmed_mean(s, trim) for s in client_scores]))
    mean, se = paired_differences(client_scores, best, trim)
    return int(np.flatnonzero(mean >= -se)[0])
