"""Tuning from the data: FedGrEM's penalty constant by federated held-out likelihood.

FedGrEM's accuracy depends on the constant ``C`` of its penalty schedule
(App. B.1: ``lambda_t = kappa lambda_{t-1} + C sqrt(p + log K)``) in opposite
directions at small and large ``h``: a large ``C`` pools clients that are
alike (good at ``h = 0``), a small one lets different clients keep their own
estimates (good at large ``h``). The paper's ``C = 2`` is calibrated for its
design (``R = 5``, ``n_k = 150``); with more components per client, each
component's local estimate is noisier than its threshold and nothing pools.

``penalty="auto"`` chooses ``C`` the way a statistician would, without
pooling any data: every client holds out a random ``holdout`` fraction of its
samples; FedGrEM is fitted on the rest for each ``C`` of a small grid; each
client reports its mean held-out log-likelihood per sample (one number); the
server takes the trimmed mean over clients, leaving out the ``trim`` fraction
with the lowest values so that outlier clients do not decide, and keeps the
best ``C`` by the one-standard-error rule: the smallest ``C`` whose held-out
likelihood is within one standard error (paired over clients) of the best, so
that pooling has to earn its bias. Every ``C`` is fitted from the same starts,
which makes the comparison paired in the starts too. The final fit uses all
data with the chosen ``C``.
"""

import numpy as np

__all__ = ["PENALTY_GRID", "TRIM", "kept_clients", "first_best", "holdout_split", "trimmed_mean", "select_penalty",
           "one_standard_error"]

#: Candidate constants ``C`` of the "paper" schedule (the paper's own is 2).
PENALTY_GRID = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
#: Fraction of clients left out wherever clients vote (held-out scores, the trimmed pooled start), so
#: that up to this fraction of outlier clients cannot decide.
TRIM = 0.2


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


def kept_clients(values, trim):
    """Indices of the clients left after leaving out the ``floor(trim K)`` with the lowest ``values``."""
    values = np.asarray(values, dtype=float)
    return np.argsort(values, kind="stable")[int(np.floor(trim * len(values))):]


def holdout_split(data, fraction, random_state):
    """Every client's samples split at random: ``(train, test)``, each a :class:`FederatedData`.

    A client keeps at least one sample on each side when it has two or more.
    """
    train, test = [], []
    for k in range(data.n_clients):
        n = data.n_samples[k]
        order = data.offsets[k] + random_state.permutation(n)
        cut = n - min(max(int(round(fraction * n)), 1), n - 1) if n > 1 else n
        train.append(order[:cut])
        test.append(order[cut:])
    return data.select(train), data.select(test)


def trimmed_mean(values, trim):
    """Mean of ``values`` without the ``floor(trim * len)`` lowest."""
    return float(np.asarray(values, dtype=float)[kept_clients(values, trim)].mean())


def select_penalty(fit, family, data, grid, holdout, trim, random_state):
    """The constant of ``grid`` chosen by trimmed held-out log-likelihood and the one-standard-error rule.

    Parameters
    ----------
    fit : callable
        ``fit(train_data, C) -> MixtureParams``: FedGrEM with the "paper" schedule and constant ``C``.
    family : Family
    data : FederatedData
        All clients' data (standard units, design applied).
    grid : sequence of float
    holdout, trim : float
        The fraction of each client's samples held out, and of clients left out of the mean.
    random_state : RandomState

    Returns
    -------
    best : float
        The constant chosen by :func:`one_standard_error`.
    table : dict
        ``"C"``: the grid; ``"score"``: trimmed mean held-out log-likelihood
        per sample for each; ``"client_scores"``: (len(grid), K).
    """
    train, test = holdout_split(data, holdout, random_state)
    has_test = test.n_samples > 0
    client_scores = []
    for C in grid:
        log_norm, _ = family.log_resp(test, fit(train, C))
        per_client = np.add.reduceat(log_norm, test.offsets[:-1][has_test]) / test.n_samples[has_test]
        client_scores.append(per_client)
    client_scores = np.array(client_scores)
    scores = np.array([trimmed_mean(s, trim) for s in client_scores])
    return float(grid[one_standard_error(client_scores, trim)]), {"C": np.asarray(grid, dtype=float),
                                                                   "score": scores, "client_scores": client_scores}


def one_standard_error(client_scores, trim):
    """Index of the smallest constant not significantly worse than the best (the one-standard-error rule).

    Differences to the best constant are paired by client, over the clients
    the best one's trimmed mean keeps; a constant is within one standard
    error when its mean difference is at least ``-sd / sqrt(n)``. The rule
    leans towards less pooling, the robust side: pooling must earn its bias
    by a held-out gain larger than the noise of the comparison.
    """
    best = int(np.argmax([trimmed_mean(s, trim) for s in client_scores]))
    kept = kept_clients(client_scores[best], trim)
    diff = client_scores[:, kept] - client_scores[best, kept]
    se = diff.std(axis=1, ddof=1) / np.sqrt(len(kept)) if len(kept) > 1 else np.zeros(len(diff))
    return int(np.flatnonzero(diff.mean(axis=1) >= -se)[0])
