"""Simulated federated mixtures with a known truth (FedGrEM Sec. 4.1, App. B.1).

The default centres are App. B.1's five centres in ``R^10``. The paper prints
the last entry of the second centre as ``-`` (the digit is lost); fedmm reads
it as ``-1``. Every client's parameters are the centres moved by exactly
``h`` in a random direction, ``theta_r^{(k)} = centre_r + h z / ||z||``, and
its mixing proportions are drawn from ``Dirichlet(concentration * 1_R)``.
"""

from typing import NamedTuple

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["PAPER_CENTERS", "Truth", "make_federated_gmm", "make_grouped_gmm", "make_federated_mor", "sample_gmm",
           "sample_mor", "snr"]

PAPER_CENTERS = np.array([
    [1, 0, 3, -1, 1, -1, 0, 1, 1, -1],
    [0, 1, -1, -3, 2, -1, 2, -1, 1, -1],   # last entry lost in print; read as -1
    [-3, -1, 2, -1, 2, -1, 1, -3, -1, -2],
    [1, -2, 0, -1, -2, 2, 1, 3, 1, -1],
    [3, 1, 2, -1, -2, 1, 2, -1, -1, 2],
], dtype=float)


class Truth(NamedTuple):
    """The parameters the data were drawn from.

    Attributes
    ----------
    weights : ndarray of shape (K, R)
    theta : ndarray of shape (K, R, d)
        Means (GMM) or regression coefficients (MoR).
    outliers : ndarray of shape (K,), bool
        Clients whose data do not follow the mixture (their ``weights`` and
        ``theta`` are drawn but unused).
    centers : ndarray of shape (R, d)
    labels : list of ndarray
        Component of every sample (-1 on outlier clients).
    """

    weights: np.ndarray
    theta: np.ndarray
    outliers: np.ndarray
    centers: np.ndarray
    labels: list


def _truth(n_clients, n_samples, centers, h, concentration, outlier_clients, rng):
    centers = PAPER_CENTERS if centers is None else np.asarray(centers, dtype=float)
    R, d = centers.shape
    z = rng.standard_normal((n_clients, R, d))
    theta = centers + h * z / np.linalg.norm(z, axis=-1, keepdims=True)
    weights = rng.dirichlet(np.full(R, float(concentration)), size=n_clients)
    outliers = np.zeros(n_clients, dtype=bool)
    outliers[list(outlier_clients)] = True
    truth = Truth(weights, theta, outliers, centers, [])
    return truth._replace(labels=_labels(truth, n_samples, rng))


def make_federated_gmm(n_clients=10, n_samples=150, *, centers=None, h=0.0, concentration=5.0,
                       outlier_clients=(), random_state=None):
    """Draw a federated Gaussian mixture with identity covariances (FedGrEM eq. (4)).

    Parameters
    ----------
    n_clients : int
    n_samples : int or sequence of int
        Samples per client (one number for all, or one per client).
    centers : array-like of shape (R, d), optional
        Component centres; App. B.1's five centres in ``R^10`` by default.
    h : float
        Every client's mean sits at distance exactly ``h`` from its centre.
    concentration : float
        Mixing proportions are ``Dirichlet(concentration * 1_R)`` (App. B.1: 5).
    outlier_clients : sequence of int
        Clients whose data are ``N(2 * 1_d, 3 I_d)`` instead (App. B.1, with
        ``3 I`` read as the covariance).
    random_state : int, RandomState instance or None

    Returns
    -------
    X : list of ndarray of shape (n_k, d)
    truth : Truth
    """
    rng = check_random_state(random_state)
    truth = _truth(n_clients, n_samples, centers, h, concentration, outlier_clients, rng)
    return _draw_gmm(truth, truth.labels, rng), truth


def make_grouped_gmm(n_groups=3, clients_per_group=4, n_samples=60, *, n_components=3, n_features=5, spread=3.0,
                     outlier=True, random_state=None):
    """Clients in groups, each group with its own component centres, plus one outlier client: a clustered design
    for personalized methods (FedeRiCo's experiments give each group of clients its own distribution).

    Group ``g``'s centres are ``spread * N(0, I)`` draws of shape (R, d), independent across groups; its clients
    follow :func:`make_federated_gmm` at ``h = 0`` around them. The outlier client, last, draws
    ``N(2 * 1_d, 3 I_d)`` (App. B.1's outlier).

    Returns
    -------
    X : list of ndarray of shape (n_samples, d)
    truth : Truth
        ``centers`` of shape (n_groups, R, d); ``theta`` of the outlier client is its group-0 placeholder.
    groups : ndarray of shape (K,)
        Each client's group, ``-1`` for the outlier.
    """
    rng = check_random_state(random_state)
    centers = spread * rng.standard_normal((n_groups, n_components, n_features))
    parts = [_truth(clients_per_group, n_samples, c, 0.0, 5.0, (), rng) for c in centers]
    if outlier:
        parts.append(_truth(1, n_samples, centers[0], 0.0, 5.0, (0,), rng))
    truth = Truth(*(np.concatenate([getattr(t, f) for t in parts]) for f in ("weights", "theta", "outliers")),
                  centers, [lab for t in parts for lab in t.labels])
    groups = np.concatenate([np.full(clients_per_group, g) for g in range(n_groups)] + ([[-1]] if outlier else []))
    return _draw_gmm(truth, truth.labels, rng), truth, groups


def make_federated_mor(n_clients=10, n_samples=150, *, centers=None, h=0.0, concentration=5.0,
                       outlier_clients=(), random_state=None):
    """Draw a federated mixture of linear regressions with unit noise (FedGrEM eq. (5)).

    ``x ~ N(0, I_d)`` and ``y = x^T theta_z + N(0, 1)``; on outlier clients
    ``y = x^T (3 * 1_d) + N(0, 1)`` (App. B.1). Parameters as in
    :func:`make_federated_gmm`, with ``centers`` the regression coefficients.

    Returns
    -------
    X : list of ndarray of shape (n_k, d)
    y : list of ndarray of shape (n_k,)
    truth : Truth
    """
    rng = check_random_state(random_state)
    truth = _truth(n_clients, n_samples, centers, h, concentration, outlier_clients, rng)
    X, y = _draw_mor(truth, truth.labels, rng)
    return X, y, truth


def _labels(truth, n_samples, rng):
    n_k = np.broadcast_to(np.asarray(n_samples), (len(truth.weights),))
    return [np.full(n, -1) if out else rng.choice(len(w), size=n, p=w)
            for n, w, out in zip(n_k, truth.weights, truth.outliers)]


def _draw_gmm(truth, labels, rng):
    d = truth.theta.shape[-1]
    return [2.0 + np.sqrt(3.0) * rng.standard_normal((len(lab), d)) if out
            else truth.theta[k, lab] + rng.standard_normal((len(lab), d))
            for k, (lab, out) in enumerate(zip(labels, truth.outliers))]


def _draw_mor(truth, labels, rng):
    d = truth.centers.shape[1]
    X, y = [], []
    for k, lab in enumerate(labels):
        Xk = rng.standard_normal((len(lab), d))
        coef = np.full((len(lab), d), 3.0) if truth.outliers[k] else truth.theta[k, lab]
        X.append(Xk)
        y.append(np.einsum("ij,ij->i", Xk, coef) + rng.standard_normal(len(lab)))
    return X, y


def sample_gmm(truth, n_samples, random_state=None):
    """New samples (e.g. held-out test data) from the same federated GMM.

    Returns
    -------
    X : list of ndarray, labels : list of ndarray (-1 on outlier clients)
    """
    rng = check_random_state(random_state)
    labels = _labels(truth, n_samples, rng)
    return _draw_gmm(truth, labels, rng), labels


def sample_mor(truth, n_samples, random_state=None):
    """New samples from the same federated mixture of regressions: ``X``, ``y``, labels."""
    rng = check_random_state(random_state)
    labels = _labels(truth, n_samples, rng)
    X, y = _draw_mor(truth, labels, rng)
    return X, y, labels


def snr(truth):
    """Signal-to-noise ratio of App. B.1: ``min_{k in S} max_{r != r'} ||theta_r^(k) - theta_r'^(k)||``.

    Fig. 3 plots errors against ``h / SNR``.
    """
    theta = truth.theta[~truth.outliers]
    gaps = np.linalg.norm(theta[:, :, None] - theta[:, None, :], axis=-1)
    return float(gaps.max(axis=(1, 2)).min())
