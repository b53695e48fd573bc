"""The federated data container: every client's samples in one contiguous array.

Input arrives either as a list of per-client arrays or as one array with a
``groups`` vector of client ids. Both are validated once, here, and stored as a
single C-contiguous ``(n, d)`` array plus client ``offsets`` (client ``k`` owns
rows ``offsets[k]:offsets[k + 1]``), which is what the batched kernels want.
"""

import warnings
from dataclasses import dataclass

import numpy as np

from .reductions import has_tiny

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
    feature_names : ndarray of str or None
        Column names when ``X`` came as pandas DataFrames with string column names.
    """

    X: np.ndarray
    y: np.ndarray | None
    offsets: np.ndarray
    client_ids: np.ndarray
    order: np.ndarray | None = None
    feature_names: np.ndarray | None = None

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
        one = self.client_data(k)
        return one.X, one.y

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
        return self.take_rows(np.concatenate(rows), [len(r) for r in rows], client_ids)

    def take_rows(self, index, sizes, client_ids=None):
        """New data from the rows ``index``: the first ``sizes[0]`` of them the first client's, and so on
        (``client_ids`` names the clients; by default the same clients as here)."""
        index = np.asarray(index, dtype=np.intp)
        return FederatedData(self.X[index], None if self.y is None else self.y[index],
                             np.concatenate([[0], np.cumsum(sizes)]).astype(np.intp),
                             self.client_ids if client_ids is None else client_ids)

    def clients(self, index):
        """The clients ``index`` (positions, in that order) alone; all of them in order without a copy."""
        index = np.asarray(index, dtype=np.intp)
        if np.array_equal(index, np.arange(self.n_clients)):
            return FederatedData(self.X, self.y, self.offsets, self.client_ids)
        return self.take_rows(self.client_rows(index), self.n_samples[index], self.client_ids[index])

    def client_rows(self, index):
        """The rows of the clients ``index`` (positions), client after client, as one index array."""
        sizes = self.n_samples[index]
        first = np.cumsum(sizes) - sizes  # where each client's rows begin in the result
        return np.arange(sizes.sum()) + np.repeat(self.offsets[index] - first, sizes)

    def copies(self):
        """(K,) for each client the position of an earlier client whose rows (and responses) it repeats bit for
        bit, -1 for none: the same data loaded twice, or a party that copies another's. Across parties the
        server counts such a copy once (its replies repeat the first's, :class:`fedmm.flower.server.FlowerClients`);
        in one process the fit names it (:func:`check_copies`).

        Only clients that share a fingerprint with another (:meth:`_fingerprints`) are compared byte for byte."""
        _, group = np.unique(self._fingerprints(), return_inverse=True)
        out, first = np.full(self.n_clients, -1, dtype=np.intp), {}
        for k in np.flatnonzero(np.bincount(group)[group] > 1):
            one = self.client_data(k)
            j = first.setdefault((one.X.tobytes(), None if one.y is None else one.y.tobytes()), k)
            out[k] = -1 if j == k else j
        return out

    def _fingerprints(self):
        """(K,) uint64, equal for clients whose rows and responses are: a hash (wrapping sums of the bits
        times fixed odd numbers) of each client's size and first and last rows."""
        ends = np.concatenate([self.offsets[:-1], self.offsets[1:] - 1])
        parts = [self.X[ends]] + ([] if self.y is None else [self.y[ends, None]])
        bits = np.hstack([self.n_samples[:, None].astype(np.uint64)] +
                         [np.hstack(np.split(p.astype(np.float64).view(np.uint64), 2)) for p in parts])
        odd = np.random.RandomState(0).randint(2 ** 62, size=bits.shape[1], dtype=np.uint64) * 2 + 1
        return (bits * odd).sum(axis=1)

    def with_X(self, X):
        """Same clients and order, new sample matrix (e.g. a design matrix)."""
        return FederatedData(X, self.y, self.offsets, self.client_ids, self.order, self.feature_names)

    @classmethod
    def from_input(cls, X, y=None, groups=None, *, require_y=False, n_features=None, client_ids=None,
                   model="the model"):
        """Validate client data and pack it.

        Parameters
        ----------
        X : list of array-like of shape (n_k, d), or array-like of shape (n, d)
            One array per client, or all samples with ``groups`` (without: one client).
        y : list of array-like of shape (n_k,), or array-like of shape (n,), optional
            Responses, matched to ``X`` client by client.
        groups : array-like of shape (n,), optional
            Client id of every row of ``X`` when ``X`` is a single array: all
            numbers or all strings.
        require_y : bool
            Raise if ``y`` is missing (mixtures of regressions).
        n_features : int, optional
            Expected ``d`` (when predicting with a fitted model).
        client_ids : array-like, optional
            Names of the clients of list input in messages and ``client_ids``
            (default ``0..K-1``).
        model : str
            What expects ``n_features``, for its error message.

        Raises
        ------
        ValueError, TypeError
            Naming the client (by the caller's id) and the row of the
            caller's array: empty client, wrong dimension, ragged rows,
            non-real values, NaN or infinity, ``X``/``y`` length mismatch,
            sparse or one-pass (generator) input, mixed-type group ids.
        """
        if require_y and y is None:
            raise ValueError("y is required: a mixture of regressions needs one response per sample.")
        _check_container(X, "X")
        if isinstance(X, (list, tuple)) and len(X) == 0:
            raise ValueError("X is an empty list: at least one client is needed.")
        if not isinstance(X, (list, tuple)) and groups is None:
            X, y = [X], None if y is None else [y]  # one array without groups: one client (scikit-learn's fit(X))
        names = _feature_names(X)
        order = None
        if isinstance(X, (list, tuple)):
            if groups is not None:
                raise ValueError("Pass either a list of client arrays or one array with groups=, not both.")
            if y is not None and (not isinstance(y, (list, tuple)) or len(y) != len(X)):
                raise ValueError("With a list of client arrays X, y must be a list of the same length "
                                 f"(got {len(X)} clients in X).")
            client_ids = np.arange(len(X)) if client_ids is None else np.asarray(client_ids)
            Xs = [_client_X(Xk, _name(k, client_ids[k])) for k, Xk in enumerate(X)]
            _check_dimensions(Xs, client_ids, n_features, model)
            offsets = np.concatenate([[0], np.cumsum([len(Xk) for Xk in Xs])]).astype(np.intp)
            X_all = np.ascontiguousarray(np.concatenate(Xs), dtype=_storage_dtype(Xs))   # a copy, also of one client
            y_all = None if y is None else np.concatenate(
                [_client_y(yk, Xk.shape[0], _name(k, client_ids[k])) for k, (Xk, yk) in enumerate(zip(Xs, y))])
        else:
            client_ids, order, offsets, X_all, y_all = _grouped(X, y, groups, n_features, model)
        _check_values(X_all, offsets, client_ids, order, "X")
        if y_all is not None:
            _check_values(y_all, offsets, client_ids, order, "y")
            y_all = np.ascontiguousarray(y_all, dtype=np.float64)
        return cls(X_all, y_all, offsets, np.asarray(client_ids), order, names)

    def check_components(self, n_components, *, per_client):
        """:func:`check_components` for these clients."""
        check_components(self.n_samples, self.client_ids, n_components, per_client=per_client, stacklevel=4)


def check_components(n_samples, client_ids, n_components, *, per_client, stacklevel=5):
    """Check there are enough samples for ``n_components`` components.

    With ``per_client=True`` (each client fits its own mixture) a client
    with fewer samples than components makes the fit impossible; otherwise
    such a client only draws a warning, since it borrows strength from the
    others, and only the total must reach ``n_components``.
    """
    n_k = np.asarray(n_samples)
    if n_k.sum() < n_components:
        raise ValueError(f"{n_k.sum()} samples in all cannot fit {n_components} components; "
                         "lower n_components or add data.")
    small = np.flatnonzero(n_k < n_components)
    if small.size == 0:
        return
    names = ", ".join(f"{_name(k, client_ids[k])} (n={n_k[k]})" for k in small[:5])
    if per_client:
        raise ValueError(f"{names} {'has' if small.size == 1 else 'have'} fewer samples than "
                         f"n_components={n_components}, so a per-client fit is impossible; use a "
                         "federated or pooled method, lower n_components, or drop the client.")
    warnings.warn(f"{names} {'has' if small.size == 1 else 'have'} fewer samples than "
                  f"n_components={n_components}; their local estimates rest on the other clients.",
                  UserWarning, stacklevel=stacklevel)


class CopiedClientWarning(UserWarning):
    """Clients whose rows repeat another client's bit for bit."""


def check_copies(data, stacklevel=4):
    """Warn of clients whose rows repeat an earlier client's (:meth:`FederatedData.copies`); their positions."""
    copies = data.copies()
    copied = np.flatnonzero(copies >= 0)
    if copied.size:
        pairs = ", ".join(f"{_name(k, data.client_ids[k])} repeats {_name(j, data.client_ids[j])}"
                          for k, j in zip(copied[:5], copies[copied[:5]]))
        warnings.warn(f"{copied.size} client(s) hold another client's rows bit for bit ({pairs}"
                      f"{', ...' if copied.size > 5 else ''}): the same data loaded twice, or a party copying "
                      "another's. Each copy counts as a client of its own in this fit, twice the original's "
                      "weight; remove the copies to count each party once, as the server across parties does. "
                      "FedGrEM lists them in suspected_outliers_.", CopiedClientWarning, stacklevel=stacklevel)
    return copied


class SingularComponentWarning(UserWarning):
    """A fitted component holds fewer samples than its own variance needs (:func:`singular_components`)."""


#: A component with fewer samples than this (its ``N_kr``, or the total over clients) is empty, not singular.
EMPTY_SIZE = 0.5


class EmptyComponentWarning(SingularComponentWarning):
    """A fitted component is empty on every client: the model has fewer components than asked
    (:func:`check_empty_components`)."""


def check_empty_components(N, stacklevel=4):
    """The components (R,) bool that hold less than half a sample over all clients, after a warning.

    EM never revives a component whose proportions have gone to zero everywhere (its responsibilities
    are proportional to them), so such a fit is a mixture of fewer components, usually from a poor
    start: on the diabetes data with 5 random clients, FedEM's common start ended with one line and
    two empty components in 4 of 5 seeds at ``n_components=3``. flexmix drops such components
    (``minprior``) and says so; scikit-learn keeps them silently; fedmm keeps them (the shapes follow
    ``n_components``) and warns.
    """
    total = np.asarray(N, dtype=float).sum(axis=0)
    empty = total < EMPTY_SIZE
    if empty.any():
        warnings.warn(f"Component(s) {', '.join(map(str, np.flatnonzero(empty)))} are empty on every client (less "
                      f"than half a sample in all): the fit is a mixture of {int((~empty).sum())} of the "
                      f"n_components={len(total)} components, and EM cannot bring an empty one back. Try other "
                      "starts (n_init, or another init) or fewer components.", EmptyComponentWarning,
                      stacklevel=stacklevel)
    return empty


def singular_components(N, minimum, *, per_client=True):
    """Which components are singular (K, R), bool: those whose own estimate rests on at least half a sample
    but fewer than ``minimum``, the family's :meth:`~fedmm.families.Family.min_component_size`.

    With ``per_client`` (each client fits its mixture alone, as local EM does) a component's estimate rests
    on its client's ``N_kr``; otherwise on at most the federation's ``sum_k N_kr``, so a component is
    singular on every client when that total is too small. Such a component's variance (or a regression's
    residual) is zero up to the regularizer and its likelihood nearly unbounded: it sits on a few samples
    (a spurious maximizer of the likelihood), and which samples, the start and rounding decide (so the fit
    is equivariant only to rounding; ``docs/units.md``). Components with less than half a sample are
    empty rather than singular: they weigh nothing.
    """
    N = np.asarray(N, dtype=float)
    if not per_client:
        N = np.broadcast_to(N.sum(axis=0), N.shape)
    return (N >= EMPTY_SIZE) & (N < minimum)


def check_component_sizes(N, client_ids, minimum, *, per_client, stacklevel=4):
    """The singular components of a fit with component sizes ``N`` (K, R) (:func:`singular_components`),
    after a warning that names their clients, or with ``per_client=False`` the components and their total
    sizes. scikit-learn fits such components silently (mclust reports their BIC as missing)."""
    singular = singular_components(N, minimum, per_client=per_client)
    if not singular.any():
        return singular
    if per_client:
        clients = np.flatnonzero(singular.any(axis=1))
        names = ", ".join(f"{_name(k, client_ids[k])} ({singular[k].sum()})" for k in clients[:5])
        more = f" and {clients.size - 5} more clients" if clients.size > 5 else ""
        where = (f"{singular.sum()} of {singular.size} components rest on fewer than {minimum} samples of their "
                 f"client, in {names}{more}: fitted by a client alone such a component")
        advice = "a method that pools across clients (e.g. 'fedgrem'), fewer components"
    else:
        total = np.asarray(N, dtype=float).sum(axis=0)
        # Rounded down, so that a total just below the minimum does not print as the minimum.
        held = ", ".join(f"{r} ({np.floor(100 * total[r]) / 100:g})" for r in np.flatnonzero(singular[0]))
        where = (f"Component(s) {held} hold fewer than {minimum} samples over all clients: such a component")
        advice = "other starts (n_init), fewer components"
    warnings.warn(f"{where} is singular (a variance of zero, or a regression line through its points), held "
                  "only by the regularizer; it sits on its few samples, a spurious maximizer of the likelihood, "
                  f"and the fit depends on the start and on rounding. Use {advice}, or a simpler covariance or "
                  "noise model.", SingularComponentWarning, stacklevel=stacklevel)
    return singular


def _name(k, client_id):
    client_id = getattr(client_id, "item", lambda: client_id)()  # numpy scalar -> plain Python value
    return f"client {k}" if client_id == k else f"client {client_id!r}"


def _check_container(value, what):
    """Refuse what cannot be read as dense arrays: sparse matrices and one-pass iterators."""
    items = value if isinstance(value, (list, tuple)) else [value]
    if any(hasattr(v, "tocsr") or type(v).__module__.startswith("scipy.sparse") for v in items):
        raise TypeError(f"{what} is a sparse matrix; fedmm needs dense arrays (convert with .toarray()).")
    if not isinstance(value, (list, tuple)) and not hasattr(value, "__len__") and hasattr(value, "__iter__"):
        raise TypeError(f"{what} is a {type(value).__name__}, which can be read only once; pass a list "
                        f"(e.g. list({what})) or an array.")


def _as_array(value, what):
    """``np.asarray(value)`` with ragged input reported as such."""
    try:
        return np.asarray(value)
    except ValueError as err:
        if "inhomogeneous" not in str(err) and "sequence" not in str(err):
            raise
        raise ValueError(f"{what} is ragged (rows of different lengths); every row needs the same "
                         "number of features.") from None


def _feature_names(X):
    """String column names of DataFrame input (all clients alike), else None."""
    frames = X if isinstance(X, (list, tuple)) else [X]
    columns = [getattr(f, "columns", None) for f in frames]
    if any(c is None for c in columns) or not all(isinstance(name, str) for c in columns for name in c):
        return None
    names = [list(c) for c in columns]
    if any(n != names[0] for n in names[1:]):
        differ = next(k for k, n in enumerate(names) if n != names[0])
        raise ValueError(f"The clients' DataFrames have different columns: client 0 has {names[0]}, "
                         f"client {differ} has {names[differ]}; give every client the same columns in the same order.")
    return np.asarray(names[0], dtype=object)


def _check_groups(groups):
    groups = np.asarray(groups)
    if groups.dtype == object:
        kinds = {"None" if g is None else "str" if isinstance(g, str) else
                 "number" if isinstance(g, (int, np.integer, float, np.floating)) and not isinstance(g, bool)
                 else type(g).__name__ for g in groups.ravel()}
        if kinds - {"str", "number"} or len(kinds) > 1:
            raise ValueError(f"groups must be client ids of one kind, all numbers or all strings; got {sorted(kinds)}.")
        groups = groups.astype(str if kinds == {"str"} else float)
    if not (np.issubdtype(groups.dtype, np.number) or groups.dtype.kind in "US") or groups.dtype.kind == "c":
        raise ValueError(f"groups must be client ids (numbers or strings); got dtype {groups.dtype}.")
    if groups.dtype.kind == "f" and not np.all(np.isfinite(groups)):
        raise ValueError("groups contains NaN or infinity; every row needs a client id.")
    return groups


def _check_dimensions(Xs, client_ids, n_features, model):
    """Every client has ``n_features`` features (or, when fitting, the number most clients have)."""
    d = np.array([Xk.shape[1] for Xk in Xs])
    if n_features is not None and len(Xs) == 1 and d[0] != n_features:  # scikit-learn's words
        raise ValueError(f"{_name(0, client_ids[0])}: X has {d[0]} features, but {model} is expecting {n_features} "
                         "features as input.")
    expected = n_features if n_features is not None else np.bincount(d).argmax()
    wrong = np.flatnonzero(d != expected)
    if wrong.size:
        names = ", ".join(f"{_name(k, client_ids[k])} has {d[k]}" for k in wrong[:5])
        whose = "the fitted model's" if n_features is not None else "most clients'"
        raise ValueError(f"Clients must have the same number of features, {expected} ({whose}): {names}.")


def _where(bad, rows):
    """The first bad entry, as a row of the caller's array (``groups`` input) or of the client's."""
    return f"row {bad[0]} of the client's array" if rows is None else f"row {rows[bad[0]]} of X"


def _grouped(X, y, groups, n_features, model):
    """``groups`` input sorted by client: ``(client_ids, order, offsets, X, y)``, ``X`` and ``y`` in client
    order. The caller's array is checked as a whole (its shape and type are every client's: the messages
    name the first client, which the checks client by client also named) and gathered once."""
    _check_container(groups, "groups")
    X_arr = _as_array(X, "X")
    groups = _check_groups(groups)
    if groups.ndim != 1 or X_arr.ndim == 0 or len(groups) != len(X_arr):
        raise ValueError(f"groups must be 1-D with one client id per row of X "
                         f"(got shape {groups.shape} for X of shape {X_arr.shape}).")
    if groups.size == 0:
        raise ValueError("X has no rows: at least one client with samples is needed.")
    order = np.argsort(groups, kind="stable")    # one sort: np.unique's and then one of its labels' was two
    ordered = groups[order]
    new_client = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    client_ids = ordered[new_client]
    offsets = np.append(np.flatnonzero(new_client), len(groups)).astype(np.intp)
    X_all = _by_client(_client_X, X_arr, order, offsets, client_ids)                # gathered: a copy
    X_all = X_all.astype(_storage_dtype([X_all]), copy=False)
    _check_dimensions([X_all] * len(client_ids), client_ids, n_features, model)
    if y is None:
        return client_ids, order, offsets, X_all, None
    _check_container(y, "y")
    y = _as_array(y, "y")
    if y.ndim == 0 or len(y) != len(X_arr):
        raise ValueError(f"y must have one entry per row of X ({len(X_arr)} rows); got shape {y.shape}.")
    return client_ids, order, offsets, X_all, _by_client(lambda yk, name: _client_y(yk, len(yk), name), y, order,
                                                        offsets, client_ids)


def _by_client(check, values, order, offsets, client_ids):
    """``check(values, name)`` of the caller's whole array, gathered into client order. Its shape and type are
    every client's, so a failure is the first client's, except where an object array's conversion fails on
    another client's entry: then the clients are checked one by one, so that the message names that client."""
    try:
        return check(values, _name(0, client_ids[0]))[order]
    except (TypeError, ValueError):
        for k in range(len(client_ids)):
            check(values[order[offsets[k]:offsets[k + 1]]], _name(k, client_ids[k]))
        raise


def _real(values, name, what):
    """``values`` as real numbers: numeric dtypes as they are, objects converted if each is a real number."""
    if values.dtype == object:
        if any(isinstance(v, (bool, np.bool_)) for v in values.ravel()):
            raise ValueError(f"{name}: {what} must be real numbers, not booleans.")
        try:
            values = values.astype(float)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{name}: {what} must be real numbers: {err}") from None
    if values.dtype.kind not in "iuf":
        hint = ". Complex data not supported, nor booleans" if values.dtype.kind in "bc" else ""
        raise ValueError(f"{name}: {what} must be real numbers{hint}; got dtype {values.dtype}.")
    return values


def _storage_dtype(Xs):
    """float32 where every client's ``X`` is float32 (half the memory; the kernels sum in float64), as
    scikit-learn's KMeans keeps it; float64 for anything else."""
    return np.float32 if all(Xk.dtype == np.float32 for Xk in Xs) else np.float64


def _client_X(Xk, name):
    """One client's ``X`` as a 2-D array of real numbers with samples and features (its values unchecked)."""
    Xk = _as_array(Xk, f"{name}: X")
    if Xk.ndim != 2:
        hint = " Reshape your data with X_k.reshape(-1, 1) if it has one feature." if Xk.ndim == 1 else ""
        raise ValueError(f"{name}: X must be 2-D (n_samples, n_features), got shape {Xk.shape}.{hint}")
    if Xk.shape[0] == 0:
        raise ValueError(f"{name} has no samples; drop it or give it data.")
    if Xk.shape[1] == 0:
        raise ValueError(f"{name}: X has 0 feature(s) (shape={Xk.shape}) while a minimum of 1 is required.")
    return _real(Xk, name, "X")


def _client_y(yk, n_k, name):
    """One client's ``y`` as a 1-D array of ``n_k`` real numbers (its values unchecked)."""
    yk = _as_array(yk, f"{name}: y")
    if yk.ndim == 2 and yk.shape[1] == 1:
        yk = yk[:, 0]
    if yk.ndim != 1 or yk.shape[0] != n_k:
        raise ValueError(f"{name}: y must be 1-D with one entry per row of X (got shape {yk.shape} for {n_k} rows).")
    return _real(yk, name, "y")


def _check_values(values, offsets, client_ids, order, what):
    """Every client's ``values`` (``X`` or ``y``, in client order) finite and within the magnitudes the
    moments can square (:func:`_check_magnitude`), checked for all clients at once from each client's
    smallest and largest value per feature; the first client that fails is checked alone, for its message."""
    if _plainly_fine(values):
        return
    columns = values.reshape(len(values), -1)
    starts = offsets[:-1]
    largest = np.maximum(np.abs(np.maximum.reduceat(columns, starts, axis=0)),
                         np.abs(np.minimum.reduceat(columns, starts, axis=0))).astype(float)   # (K, features)
    bad = ~np.isfinite(largest) | (largest > MAX_MAGNITUDE) | ((largest > 0) & (largest < 1 / MAX_MAGNITUDE))
    failing = np.flatnonzero(bad.any(axis=1))
    if failing.size:
        k = failing[0]
        rows = slice(offsets[k], offsets[k + 1])
        _check_client_values(values[rows], _name(k, client_ids[k]), what, None if order is None else order[rows])


def _plainly_fine(values):
    """Whether all ``values`` are finite, at most ``MAX_MAGNITUDE`` in magnitude, and none nonzero below its
    reciprocal: then every client's are, and :func:`_check_values` need not look client by client (a single
    tiny value is allowed there, a feature tiny on a whole client not). Two reductions and a compiled pass for
    tiny values (:func:`fedmm.reductions.has_tiny`)."""
    with np.errstate(invalid="ignore"):
        largest = max(abs(float(values.max())), abs(float(values.min())))
    if not largest <= MAX_MAGNITUDE:   # also NaN
        return False
    if values.dtype.kind != "f":
        return True
    if values.dtype not in (np.float32, np.float64):   # float16, longdouble: the compiled pass reads neither
        values = values.astype(np.float64)             # exact within the magnitudes checked above
    return not has_tiny(values.reshape(len(values), -1), 1 / MAX_MAGNITUDE)


def _check_client_values(values, name, what, rows):
    """One client's ``values`` finite and of a magnitude the moments can square; else a ``ValueError`` naming
    the client and the first bad row."""
    if not np.all(np.isfinite(values)):
        bad = np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))
        where = f"in {bad.size} row(s)" if what == "X" else f"at {bad.size} position(s)"
        raise ValueError(f"{name}: {what} contains NaN or infinity {where} (first: {_where(bad, rows)}); "
                         "remove or impute them.")
    _check_magnitude(values, name, what, rows)


#: Magnitudes beyond which sums of squares overflow float64 (or, below the reciprocal, underflow).
MAX_MAGNITUDE = 1e150


def _check_magnitude(values, name, what, rows):
    """Every value of ``values`` (a client's X or y) at most ``MAX_MAGNITUDE`` in magnitude, and no feature
    nonzero but below its reciprocal: the moments that set the units (and a fit's statistics) square them.
    The rows are looked up only for an error."""
    columns = values.reshape(len(values), -1)
    largest = np.abs(columns).max(axis=0).astype(float)
    tiny = np.flatnonzero((largest > 0) & (largest < 1 / MAX_MAGNITUDE))
    if (largest > MAX_MAGNITUDE).any():
        huge = np.flatnonzero((np.abs(columns) > MAX_MAGNITUDE).any(axis=1))
        problem = f"reaches magnitude {largest.max():.3g} ({_where(huge, rows)}), whose square overflows"
    elif tiny.size:
        feature = f" (feature {tiny[0]})" if what == "X" else ""
        problem = f"{feature} is at most {largest[tiny[0]]:.3g} in magnitude, whose square underflows"
    else:
        return
    raise ValueError(f"{name}: {what}{'' if problem.startswith(' ') else ' '}{problem} float64; rescale it into "
                     "1e-150 .. 1e150 (fits are equivariant to units: scale the results back).")
