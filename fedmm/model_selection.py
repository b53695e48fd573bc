"""Cross-validation for federations with scikit-learn's tools: folds of rows within every client.

scikit-learn's ``GroupKFold`` holds out whole clients; a federated mixture's own parameters (each client's
proportions, and under FedGrEM its own components) are then never tested, and the held-out clients can only be
scored as new ones (``score`` fits their proportions, ``personalize``). :class:`ClientKFold` deals every
client's rows into the folds instead, so that each fold tests every client on rows it did not fit on: the split
to tune a method's options with (``docs/selection.md``, "Tuning with scikit-learn")::

    import sklearn
    from sklearn.model_selection import GridSearchCV
    sklearn.set_config(enable_metadata_routing=True)   # groups reach fit and score, not the splitter only
    search = GridSearchCV(FederatedGaussianMixture(3, method=FedGrEM()),
                          {"method__penalty": ["sure-floored", "paper"]}, cv=ClientKFold(3))
    search.fit(X, groups=client_ids)
"""

import numbers

import numpy as np
from sklearn.model_selection import BaseCrossValidator
from sklearn.model_selection._split import GroupsConsumerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import _num_samples

__all__ = ["ClientKFold"]


class ClientKFold(GroupsConsumerMixin, BaseCrossValidator):
    """K folds of rows within every client: each fold holds about ``1 / n_splits`` of every client's rows.

    Each training set has every client (with the rest of its rows), so a model fitted on it scores the test
    rows of each client under that client's own fitted mixture. It needs ``groups``, each row's client id
    (under scikit-learn's metadata routing it requests them by default, as ``GroupKFold`` does).

    Parameters
    ----------
    n_splits : int, default=5
        Number of folds, at least 2; every client needs at least that many rows.
    shuffle : bool, default=False
        Deal each client's rows in a random order. Without it row ``j`` of a client goes to fold
        ``(j + offset) % n_splits``: interleaved, so rows stored in order (by time, by component) still spread
        over every fold; ``offset`` runs on from client to client, so the folds' sizes differ by at most one.
    random_state : int, RandomState instance or None, default=None
        The order when ``shuffle`` is True.
    """

    def __init__(self, n_splits=5, *, shuffle=False, random_state=None):
        if not isinstance(n_splits, numbers.Integral) or isinstance(n_splits, bool) or n_splits < 2:
            raise ValueError(f"n_splits must be an integer of at least 2; got {n_splits!r}.")
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be True or False; got {shuffle!r}.")
        if not shuffle and random_state is not None:
            raise ValueError("Setting a random_state has no effect since shuffle is False: leave random_state "
                             "None, or set shuffle=True.")
        self.n_splits = int(n_splits)
        self.shuffle = shuffle
        self.random_state = random_state

    def get_n_splits(self, X=None, y=None, groups=None):
        """The number of folds, ``n_splits``."""
        return self.n_splits

    def split(self, X, y=None, groups=None):
        """Train and test row indices of every fold.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,), optional
        groups : array-like of shape (n_samples,)
            The client id of every row.

        Yields
        ------
        train, test : ndarray
        """
        return super().split(X, y, groups)

    def _folds(self, X, groups):
        if groups is None:
            raise ValueError("ClientKFold needs groups=<each row's client id> to split rows within every client "
                             "(with scikit-learn's searches, turn metadata routing on so that fit and score get "
                             "them too: sklearn.set_config(enable_metadata_routing=True)).")
        ids = np.asarray(groups)
        n = _num_samples(X)
        if ids.ndim != 1 or len(ids) != n:
            raise ValueError(f"groups must have one client id per row of X: shape ({n},); got {ids.shape}.")
        clients, owner, sizes = np.unique(ids, return_inverse=True, return_counts=True)
        small = sizes < self.n_splits
        if small.any():
            k = np.flatnonzero(small)[0]
            raise ValueError(f"ClientKFold(n_splits={self.n_splits}) deals every client's rows into every fold; "
                             f"{small.sum()} client(s) have fewer rows (client {clients[k].item()!r}: {sizes[k]}). Use "
                             "fewer splits.")
        rng = check_random_state(self.random_state) if self.shuffle else None
        folds, offset = np.empty(n, dtype=int), 0
        for k, size in enumerate(sizes):
            rows = np.flatnonzero(owner == k)
            if rng is not None:
                rows = rng.permutation(rows)
            folds[rows] = (np.arange(size) + offset) % self.n_splits
            offset += size
        return folds

    def _iter_test_masks(self, X=None, y=None, groups=None):
        folds = self._folds(X, groups)
        for fold in range(self.n_splits):
            yield folds == fold
