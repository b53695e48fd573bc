"""The federated data container: every client's samples in one contiguous array.

Input arrives either as a list of per-client arrays or as one array with a
``groups`` vector of client ids. Both are validated once, here, and stored as a
single C-contiguous ``(n, d)`` array plus client ``offsets`` (client ``k`` owns
rows ``offsets[k]:offsets[k + 1]``), which is what the batched kernels want.
"""

import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["FederatedData"]


@dataclass(frozen=True)
class FederatedData:
    """Samples of ``K`` clients stored contiguously.

    Attributes
    ----------
    X : ndarray of shape (n, d)
        All clients' samples, client by client.
    y : ndarray of shape (n,) or None
        Responses (mixtures of regressions only).
    offsets : ndarray of shape (K + 1,)
        Client ``k`` owns rows ``offsets[k]:offsets[k + 1]``.
    client_ids : ndarray of shape (K,)
        The label of each client: ``0..K-1`` for list input, the sorted unique
        ``groups`` values otherwise.
    order : ndarray of shape (n,) or None
        For ``groups`` input, ``X[i]`` is row ``order[i]`` of the caller's array;
        ``None`` for list input.
    """

    X: np.ndarray
    y: np.ndarray | None
    offsets: np.ndarray
    client_ids: np.ndarray
    order: np.ndarray | None = None

    @property
    def n_clients(self):
        return len(self.offsets) - 1

    @property
    def n_features(self):
        return self.X.shape[1]

    @property
    def n_samples(self):
        """Per-client sample sizes ``n_k``, shape (K,)."""
        return np.diff(self.offsets)

    def client(self, k):
        """Return ``(X_k, y_k)`` of client ``k`` (``y_k`` is None for GMMs)."""
        sl = slice(self.offsets[k], self.offsets[k + 1])
        return self.X[sl], None if self.y is None else self.y[sl]

    def client_data(self, k):
        """Client ``k`` alone, as one-client data (views of the arrays, no copy)."""
        sl = slice(self.offsets[k], self.offsets[k + 1])
        return FederatedData(self.X[sl], None if self.y is None else self.y[sl],
                             np.array([0, sl.stop - sl.start], dtype=np.intp), self.client_ids[k:k + 1])

    def split(self, values):
        """Cut a per-sample array (first axis ``n``) into a list of client arrays."""
        return np.split(values, self.offsets[1:-1])

    def to_caller_order(self, values):
        """Undo the sort by client of ``groups`` input for a per-sample array."""
        if self.order is None:
            return values
        out = np.empty_like(values)
        out[self.order] = values
        return out

    def select(self, rows, client_ids=None):
        """New data from ``rows``, one array of row indices per client kept (``client_ids`` names them;
        by default the same clients as here)."""
        sizes = [len(r) for r in rows]
        index = np.concatenate(rows).astype(np.intp)
        return FederatedData(self.X[index], None if self.y is None else self.y[index],
                             np.concatenate([[0], np.cumsum(sizes)]).astype(np.intp),
                             self.client_ids if client_ids is None else client_ids)

    def with_X(self, X):
        """Same clients and order, new sample matrix (e.g. a design matrix)."""
        return FederatedData(X, self.y, self.offsets, self.client_ids, self.order)

    @classmethod
    def from_input(cls, X, y=None, groups=None, *, require_y=False, n_features=None):
        """Validate client data and pack it.

        Parameters
        ----------
        X : list of array-like of shape (n_k, d), or array-like of shape (n, d)
            One array per client, or all samples with ``groups``.
        y : list of array-like of shape (n_k,), or array-like of shape (n,), optional
            Responses, matched to ``X`` client by client.
        groups : array-like of shape (n,), optional
            Client id of every row of ``X`` when ``X`` is a single array.
        require_y : bool
            Raise if ``y`` is missing (mixtures of regressions).
        n_features : int, optional
            Expected ``d`` (when predicting with a fitted model).

        Raises
        ------
        ValueError
            Naming the client and the problem: empty client, wrong
            dimension, NaN or infinity, ``X``/``y`` length mismatch.
        """
        if require_y and y is None:
            raise ValueError("y is required: a mixture of regressions needs one response per sample.")
        order = None
        if isinstance(X, (list, tuple)):
            if groups is not None:
                raise ValueError("Pass either a list of client arrays or one array with groups=, not both.")
            if len(X) == 0:
                raise ValueError("X is an empty list: at least one client is needed.")
            if y is not None and (not isinstance(y, (list, tuple)) or len(y) != len(X)):
                raise ValueError("With a list of client arrays X, y must be a list of the same length "
                                 f"(got {len(X)} clients in X).")
            Xs = list(X)
            ys = None if y is None else list(y)
            client_ids = np.arange(len(Xs))
        else:
            if groups is None:
                raise ValueError("A single array X needs groups= (the client id of each row); "
                                 "or pass a list with one array per client.")
            X_arr = np.asarray(X)
            groups = np.asarray(groups)
            if groups.ndim != 1 or len(groups) != len(X_arr):
                raise ValueError(f"groups must be 1-D with one client id per row of X "
                                 f"(got shape {groups.shape} for {len(X_arr)} rows).")
            client_ids, inverse = np.unique(groups, return_inverse=True)
            order = np.argsort(inverse, kind="stable")
            cuts = np.cumsum(np.bincount(inverse, minlength=len(client_ids)))[:-1]
            if y is not None and len(y) != len(X_arr):
                raise ValueError(f"y has {len(y)} entries but X has {len(X_arr)} rows.")
            Xs = np.split(X_arr[order], cuts)
            ys = None if y is None else np.split(np.asarray(y)[order], cuts)

        Xs = [_check_client_X(Xk, k, client_ids[k]) for k, Xk in enumerate(Xs)]
        d = Xs[0].shape[1] if n_features is None else n_features
        for k, Xk in enumerate(Xs):
            if Xk.shape[1] != d:
                raise ValueError(f"{_name(k, client_ids[k])} has {Xk.shape[1]} features, expected {d} "
                                 f"(the {'fitted model' if n_features is not None else 'first client'}'s).")
        if ys is not None:
            ys = [_check_client_y(yk, Xk.shape[0], k, client_ids[k]) for k, (Xk, yk) in enumerate(zip(Xs, ys))]
        offsets = np.concatenate([[0], np.cumsum([len(Xk) for Xk in Xs])]).astype(np.intp)
        X_all = np.ascontiguousarray(np.concatenate(Xs), dtype=np.float64)
        y_all = None if ys is None else np.ascontiguousarray(np.concatenate(ys), dtype=np.float64)
        return cls(X_all, y_all, offsets, np.asarray(client_ids), order)

    def check_components(self, n_components, *, per_client):
        """Check there are enough samples for ``n_components`` components.

        With ``per_client=True`` (each client fits its own mixture) a client
        with fewer samples than components makes the fit impossible; otherwise
        such a client only draws a warning, since it borrows strength from the
        others, and only the total must reach ``n_components``.
        """
        n_k = self.n_samples
        if n_k.sum() < n_components:
            raise ValueError(f"{n_k.sum()} samples in all cannot fit {n_components} components; "
                             "lower n_components or add data.")
        small = np.flatnonzero(n_k < n_components)
        if small.size == 0:
            return
        names = ", ".join(f"{_name(k, self.client_ids[k])} (n={n_k[k]})" for k in small[:5])
        if per_client:
            raise ValueError(f"{names} {'has' if small.size == 1 else 'have'} fewer samples than "
                             f"n_components={n_components}, so a per-client fit is impossible; use a "
                             "federated or pooled method, lower n_components, or drop the client.")
        warnings.warn(f"{names} {'has' if small.size == 1 else 'have'} fewer samples than "
                      f"n_components={n_components}; their local estimates rest on the other clients.",
                      UserWarning, stacklevel=3)


def _name(k, client_id):
    client_id = getattr(client_id, "item", lambda: client_id)()  # numpy scalar -> plain Python value
    return f"client {k}" if client_id == k else f"client {k} (groups value {client_id!r})"


def _check_client_X(Xk, k, client_id):
    Xk = np.asarray(Xk)
    if Xk.ndim != 2:
        hint = " Reshape with X_k.reshape(-1, 1) for one feature." if Xk.ndim == 1 else ""
        raise ValueError(f"{_name(k, client_id)}: X must be 2-D (n_samples, n_features), "
                         f"got shape {Xk.shape}.{hint}")
    if Xk.shape[0] == 0:
        raise ValueError(f"{_name(k, client_id)} has no samples; drop it or give it data.")
    if not np.issubdtype(Xk.dtype, np.number) or np.issubdtype(Xk.dtype, np.complexfloating):
        raise ValueError(f"{_name(k, client_id)}: X must be real numbers, got dtype {Xk.dtype}.")
    if not np.all(np.isfinite(Xk)):
        bad = np.flatnonzero(~np.all(np.isfinite(Xk), axis=1))
        raise ValueError(f"{_name(k, client_id)}: X contains NaN or infinity in {bad.size} row(s) "
                         f"(first: row {bad[0]}); remove or impute them.")
    return Xk


def _check_client_y(yk, n_k, k, client_id):
    yk = np.asarray(yk)
    if yk.ndim == 2 and yk.shape[1] == 1:
        yk = yk[:, 0]
    if yk.ndim != 1 or yk.shape[0] != n_k:
        raise ValueError(f"{_name(k, client_id)}: y must be 1-D with one entry per row of X "
                         f"(got shape {yk.shape} for {n_k} rows).")
    if not np.all(np.isfinite(yk)):
        bad = np.flatnonzero(~np.isfinite(yk))
        raise ValueError(f"{_name(k, client_id)}: y contains NaN or infinity at {bad.size} position(s) "
                         f"(first: {bad[0]}); remove or impute them.")
    return yk
