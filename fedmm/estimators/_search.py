"""What scikit-learn's searches (``GridSearchCV``, ``cross_val_score``, ...) need of the estimators: each row's
client id routed to ``fit`` and ``score``, a clear error where a search would otherwise fit one pooled client,
nested method options with the method given by name, and held-out clients scored as new ones
(``docs/selection.md``, "Tuning with scikit-learn")."""

import sys

import numpy as np
import sklearn
from sklearn.utils import _safe_indexing

from ..methods import METHODS

#: The scikit-learn function that fits and scores one candidate on one split, for every search and
#: ``cross_validate``, ``learning_curve`` and ``validation_curve``.
_FIT_AND_SCORE = ("sklearn.model_selection._validation", "_fit_and_score")


def in_sklearn_search(depth=40):
    """Whether this call runs inside scikit-learn's ``_fit_and_score`` (a search or a cross-validation)."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return False
        if (frame.f_globals.get("__name__"), frame.f_code.co_name) == _FIT_AND_SCORE:
            return True
        frame = frame.f_back
    return False


def routing_enabled():
    return bool(sklearn.get_config().get("enable_metadata_routing", False))


def check_search_input(estimator, X, groups):
    """Raise where a scikit-learn search would fit or score without the clients: metadata routing off (``groups``
    then goes to the splitter only, never to score, and without them every fit would pool its rows as one
    client; with routing off a search cannot be told whether it was given groups, so it is always an error), or
    a list of client arrays (the search would deal out whole clients as if they were rows, and renumber them)."""
    if not in_sklearn_search():
        return
    name = type(estimator).__name__
    if isinstance(X, (list, tuple)):
        raise ValueError(f"{name} in a scikit-learn search or cross-validation takes one array X with "
                         "groups=<each row's client id>, not a list of client arrays: the search would split "
                         "the list's clients as if they were rows. Concatenate them, pass groups, and split "
                         "within clients with fedmm.model_selection.ClientKFold (docs/selection.md).")
    if not routing_enabled():
        raise ValueError(f"{name} in a scikit-learn search or cross-validation needs metadata routing: with it "
                         "off, scikit-learn passes groups to the splitter only (every fit would pool its rows as "
                         "one client) and never to score (which cannot tell the clients apart). Turn routing on with "
                         "sklearn.set_config(enable_metadata_routing=True): fedmm's estimators request groups for "
                         "fit and score by default, so every fit and score then sees each row's client id "
                         "(split within clients with fedmm.model_selection.ClientKFold; docs/selection.md). "
                         "Routing on and no groups passed fits each fold's rows as one client.")


def set_method_params(estimator, params):
    """``params`` for ``set_params`` with ``method`` by name replaced by its method object (with its defaults)
    where nested ``method__<option>`` parameters are set, so that they have an object to go to."""
    if not any(key.startswith("method__") for key in params):
        return params
    method = params.get("method", estimator.method)
    if isinstance(method, str):
        if method not in METHODS:
            raise ValueError(f"Unknown method {method!r}; choose one of {list(METHODS)} or pass a method object "
                             "(fedmm.methods) to set its options with method__<option>.")
        params = {**params, "method": METHODS[method]()}
    elif not hasattr(method, "set_params"):
        raise ValueError(f"method__<option> parameters need method to be a method name or object (fedmm.methods); "
                         f"got {method!r}.")
    return params


def new_client_rows(estimator, X, client, groups):
    """The mask of rows whose client id in ``groups`` is not a fitted client's, or None where there are none
    (or the input is not one array with ``groups``: the usual checks then say what is wrong)."""
    if groups is None or client is not None or isinstance(X, (list, tuple)) or not hasattr(estimator, "client_ids_"):
        return None
    ids = np.asarray(groups)
    if ids.ndim != 1 or len(ids) != _n_rows(X):
        return None
    try:
        new = ~np.isin(ids, estimator.client_ids_)
    except TypeError:
        return None
    return new if new.any() else None


def score_with_new_clients(estimator, X, y, groups, new):
    """Mean log-likelihood per sample over all rows, those of fitted clients under their own mixtures, those of
    the clients not fitted (``new``) as new clients: each one's proportions fitted to its rows
    (``personalize``), its components the consensus's."""
    ids = np.asarray(groups)
    total, known = 0.0, np.flatnonzero(~new)
    if known.size:
        total += float(np.sum(estimator.score_samples(*_rows(X, y, known), groups=ids[known])))
    unseen = [np.flatnonzero(ids == u) for u in np.unique(ids[new])]
    Xs = [_safe_indexing(X, rows) for rows in unseen]
    ys = None if y is None else [_safe_indexing(y, rows) for rows in unseen]
    args = (Xs,) if y is None else (Xs, ys)
    for k, new_client in enumerate(estimator.personalize(*args)):
        total += float(np.sum(new_client.score_samples(*((Xs[k],) if y is None else (Xs[k], ys[k])))))
    return total / len(ids)


def _rows(X, y, rows):
    return (_safe_indexing(X, rows),) if y is None else (_safe_indexing(X, rows), _safe_indexing(y, rows))


def _n_rows(X):
    shape = getattr(X, "shape", None)
    return shape[0] if shape is not None and len(shape) else len(X)
