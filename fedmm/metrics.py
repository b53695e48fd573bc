"""Errors against a known truth, up to each client's label permutation (FedGrEM App. C, Sec. 4)."""

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score

from .alignment import bottleneck

__all__ = ["best_permutation", "estimation_errors", "misclustering_rate", "adjusted_rand_index"]


def best_permutation(theta_hat, theta):
    """The relabelling of an estimate that best matches the truth.

    ``pi*_k = argmin_pi sum_r ||theta_hat_{pi(r)} - theta_r||_2`` (App. C.2),
    solved exactly as an assignment problem.

    Parameters
    ----------
    theta_hat, theta : ndarray of shape (R, p)

    Returns
    -------
    perm : ndarray of shape (R,)
        ``theta_hat[perm]`` lines up with ``theta``.
    """
    cost = np.linalg.norm(theta[:, None, :] - theta_hat[None, :, :], axis=-1)
    return linear_sum_assignment(cost)[1]


def estimation_errors(weights_hat, theta_hat, weights, theta, matching="joint"):
    """Per-client maximum errors over components, after the client's best permutation.

    ``max_r |w_hat_{pi(r)} - w_r|`` and ``max_r ||theta_hat_{pi(r)} - theta_r||_2``
    per client: the quantities whose maximum over non-outlier clients the
    paper reports (Sec. 4.1, Fig. 3, Tables 4-5).

    Parameters
    ----------
    weights_hat, weights : ndarray of shape (K, R)
    theta_hat, theta : ndarray of shape (K, R, p)
    matching : {"joint", "separate"}
        ``"joint"`` (default): one permutation per client, ``pi*_k`` of App. C.2
        (from ``theta``), for both parameters: a weight is compared with the
        weight of the component it belongs to. ``"separate"``: each error is
        minimized over its own permutation, ``min_pi max_r`` (what the
        authors' scripts compute for the published tables); the weight error
        can then pair a weight with another component's, so it is never larger
        and often smaller.

    Returns
    -------
    weight_error, theta_error : ndarray of shape (K,)
    """
    K = len(theta)
    rows = np.arange(K)[:, None]
    if matching == "joint":
        perms = np.array([best_permutation(th, t) for th, t in zip(theta_hat, theta)])
        weight_error = np.abs(weights_hat[rows, perms] - weights).max(axis=1)
        theta_error = np.linalg.norm(theta_hat[rows, perms] - theta, axis=-1).max(axis=1)
    elif matching == "separate":
        weight_error = np.array([bottleneck(np.abs(w[:, None] - wh[None, :])) for wh, w in zip(weights_hat, weights)])
        theta_error = np.array([bottleneck(np.linalg.norm(t[:, None] - th[None, :], axis=-1))
                                for th, t in zip(theta_hat, theta)])
    else:
        raise ValueError(f"matching must be 'joint' or 'separate', got {matching!r}.")
    return weight_error, theta_error


def misclustering_rate(labels_true, labels_pred):
    """Fraction of samples in the wrong cluster, under the best matching of cluster labels.

    ``min_pi (1/n) sum_i 1{pi(pred_i) != true_i}``, the mis-clustering error of
    the paper's real-data study (Sec. 4.2), solved as an assignment problem
    on the confusion matrix.

    Parameters
    ----------
    labels_true, labels_pred : array-like of shape (n,)
        Non-negative integer labels.
    """
    labels_true, labels_pred = np.asarray(labels_true), np.asarray(labels_pred)
    if labels_true.shape != labels_pred.shape:
        raise ValueError(f"labels_true and labels_pred differ in shape: {labels_true.shape} vs {labels_pred.shape}.")
    size = max(labels_true.max(), labels_pred.max()) + 1
    confusion = np.zeros((size, size))
    np.add.at(confusion, (labels_pred, labels_true), 1)
    rows, cols = linear_sum_assignment(-confusion)
    return 1.0 - confusion[rows, cols].sum() / len(labels_true)


def adjusted_rand_index(labels_true, labels_pred):
    """Adjusted Rand index of two partitions (scikit-learn's ``adjusted_rand_score``): 1 is identical, ~0 chance."""
    return float(adjusted_rand_score(labels_true, labels_pred))
