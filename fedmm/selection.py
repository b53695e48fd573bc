"""Choosing the number of components (and the covariance type) of a federated mixture.

Three criteria, each computed without pooling any data, and ``"fewest"``, the fewer components of BIC's and
cross-validation's choices, or of ICL's too where the clients differ (``"auto"``, the default, is the method's
own choice: ``"fewest"`` for FedGrEM, ``"bic"`` for the others):

- ``"bic"``: ``-2 loglik + log(n) * n_parameters`` (Schwarz 1978; lower is
  better), with the parameters the fit actually has
  (:meth:`FederatedGaussianMixture.bic`): FedGrEM's components count once
  where clients were pooled onto the consensus and once per client where not.
  Each client sends its log-likelihood and the server adds them.
- ``"icl"``: BIC plus twice the entropy of the hard classification
  (Biernacki, Celeux & Govaert 2000; mclust's ``icl``), which prefers
  well-separated components.
- ``"cv"``: federated held-out log-likelihood. Every client splits its samples
  into ``n_folds`` folds; for each fold the model is fitted on the others and
  every client scores its held-out samples, so that each sample is held out
  once. Each client reports one number, its mean held-out log-likelihood per
  sample, and the server takes the mean over clients without the lowest
  ``trim`` fraction, so that outlier clients do not decide (the trimmed
  held-out likelihood of :mod:`fedmm.algorithms.tuning`). Higher is better; the table
  reports its negative, so that lower is better for every criterion. Held-out
  likelihood keeps rising a little past the true number of components (an
  extra component costs little held-out fit), so the choice follows the
  one-standard-error rule, as FedGrEM's ``penalty="auto"`` does: the fewest
  components whose trimmed held-out likelihood is within one standard error
  (paired over clients) of the best.

Why ``"fewest"`` for FedGrEM: where clients differ, each criterion alone can choose a component too many, BIC
and cross-validation mostly in different data sets, hence the fewer of their choices. But where the clients'
spread is comparable to the components', both can: FedGrEM shrinks each client's components towards the
consensus, so part of the clients' differences stays in the fit's residuals, and one component more, split
off next to another and shared by all clients, each client holding its own share of the two, follows each
client's shift along the line between them. That fit is better in sample and held out (two components in two
dimensions, clients moved by half the noise's scale: BIC chose three in 4 of 10 seeds, cross-validation in
all 10). ICL's entropy term charges what such a split is, two components whose rows cannot be told apart: ICL
was built against BIC's habit of covering one cluster that is not Gaussian with several components
(Biernacki, Celeux & Govaert 2000), and the clients' shifts make each pooled cluster one. ICL also merges
true components that overlap (two 2.5 noise scales apart), so it is asked only where the fit chosen by the
other two leaves some client's component off the consensus (FedGrEM's ``pooled_``), the clients differing by
FedGrEM's own test; where they agree the split has no differences to follow.

The grid is ``n_components`` times, for Gaussian mixtures, ``covariance_types``
(mclust's habit of comparing models over both), and the best setting is
refitted on all the data. A fit with singular components (fewer samples than
a component's own variance needs, ``singular_components_``) gets no BIC or ICL
(NaN in the table, mclust's NA) and is not chosen: its likelihood is that of a
component collapsed onto a few samples, not of the data.
"""

import warnings
from typing import NamedTuple

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from .data import FederatedData, SingularComponentWarning
from .methods import make_method
from .robust import TRIM, client_folds, one_standard_error, trimmed_mean

__all__ = ["CRITERIA", "Selection", "select_n_components"]

CRITERIA = ("auto", "bic", "icl", "cv", "fewest")


class Selection(NamedTuple):
    """The outcome of :func:`select_n_components`.

    Attributes
    ----------
    criterion : str
    table : dict of ndarray
        ``"n_components"``, ``"covariance_type"`` (Gaussian mixtures; None
        otherwise) and ``"score"``, one entry per setting of the grid; the score
        is the criterion, lower is better (for ``"cv"`` the negated trimmed
        held-out log-likelihood per sample); NaN for BIC and ICL where the fit
        had singular components ``"fewest"`` adds ``"bic"``, ``"icl"``
        and ``"clients_differ"``.
    best_params : dict
        The estimator arguments of the chosen setting: the lowest score, or for
        ``"cv"`` the one-standard-error choice.
    best_estimator : estimator
        Refitted on all the data with ``best_params``.
    """

    criterion: str
    table: dict
    best_params: dict
    best_estimator: object

    def plot(self, ax=None):
        """The criterion against the number of components, one line per covariance type, best marked.

        Needs matplotlib (the ``plot`` extra). Returns the axes.
        """
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(5, 3.5))[1]
        types = self.table["covariance_type"]
        for kind in dict.fromkeys(types):
            rows = types == kind
            ax.plot(self.table["n_components"][rows], self.table["score"][rows], "o-",
                    label=kind if kind is not None else None)
        ax.plot(self.best_params["n_components"], np.nanmin(self.table["score"]), "k*", markersize=14, label="chosen")
        ax.set_xlabel("number of components R")
        ax.set_ylabel({"cv": "- trimmed held-out log-lik. per sample"}.get(self.criterion, self.criterion.upper()))
        ax.legend()
        return ax


def select_n_components(estimator, X, y=None, groups=None, n_components=range(1, 10), criterion="auto",
                        covariance_types=None, n_folds=5, trim=TRIM, random_state=None):
    """Choose the number of components of a federated mixture by BIC, ICL or federated cross-validation.

    Parameters
    ----------
    estimator : FederatedGaussianMixture or FederatedMixtureRegression
        Its other arguments (method, starts, ...) are kept; it is cloned, never fitted itself.
    X, y, groups
        The data, in any layout ``fit`` takes (``y`` for regressions only).
    n_components : iterable of int, default=range(1, 10)
    criterion : {"auto", "bic", "icl", "cv", "fewest"}, default="auto"
        "fewest": the fewer components of BIC's and cross-validation's choices (the latter's on a tie), and of
        ICL's too where that choice's fit leaves some client's component off the consensus (``pooled_``;
        methods without it: never). The table's ``"score"`` is cross-validation's, ``"bic"`` BIC's, ``"icl"``
        ICL's (from the same fits) and ``"clients_differ"`` says which fits left a client off. "auto": the
        method's own
        (:attr:`fedmm.methods.Method.selection_criterion`): ``"fewest"`` for FedGrEM, where BIC and
        cross-validation can prefer too many components when clients differ (module docstring,
        ``docs/selection.md``), ``"bic"`` for the others.
    covariance_types : sequence of str, optional
        Gaussian mixtures: also compare these covariance types (default: the estimator's own).
    n_folds : int, default=5
        Folds within every client for ``"cv"`` and ``"fewest"``.
    trim : float, default=0.2
        ``"cv"``, ``"fewest"``: fraction of clients with the lowest held-out likelihood left out of the mean.
    random_state : int, RandomState or None
        The folds of ``"cv"`` and ``"fewest"``.

    Returns
    -------
    Selection
    """
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}.")
    if criterion == "auto":
        criterion = make_method(estimator.method).selection_criterion
    grid_R = [int(R) for R in n_components]
    if not grid_R or min(grid_R) < 1:
        raise ValueError(f"n_components must be a non-empty range of integers >= 1; got {list(grid_R)}.")
    has_covariance = "covariance_type" in estimator.get_params()
    if covariance_types is not None and not has_covariance:
        raise ValueError("covariance_types is for Gaussian mixtures; this estimator has no covariance_type.")
    kinds = list(covariance_types) if covariance_types is not None else \
        [estimator.covariance_type] if has_covariance else [None]
    if criterion in ("cv", "fewest") and not (isinstance(n_folds, (int, np.integer)) and n_folds >= 2):
        raise ValueError(f"n_folds must be an integer >= 2, got {n_folds!r}.")
    needs_y = estimator.needs_y
    data = FederatedData.from_input(X, y, groups, require_y=needs_y)
    clients = [data.client_data(k) for k in range(data.n_clients)]
    Xs = [c.X for c in clients]
    ys = [c.y for c in clients] if needs_y else None
    settings = [{"n_components": R, **({"covariance_type": kind} if kind is not None else {})}
                for kind in kinds for R in grid_R]
    table = {"n_components": np.array([s["n_components"] for s in settings]),
             "covariance_type": np.array([s.get("covariance_type") for s in settings], dtype=object)}
    score = lambda names: _choices(estimator, Xs, ys, settings, names, data.n_samples, n_folds,  # noqa: E731
                                   trim, random_state)
    fewest = lambda *choices: min(choices, key=lambda choice: choice["n_components"])  # noqa: E731
    if criterion == "fewest":
        # BIC and cross-validation err towards too many components in their own ways: the fewer wins, held-out
        # likelihood's on a tie. Where that fit's clients differ, both can choose a component that follows their
        # differences, which ICL charges (module docstring).
        ([(cv, table["score"])], _), ([(bic, table["bic"]), (icl, table["icl"])], table["clients_differ"]) = \
            score(("cv",)), score(("bic", "icl"))
        best = fewest(cv, bic)
        if table["clients_differ"][settings.index(best)]:
            best = fewest(best, icl)
    else:
        [(best, table["score"])], _ = score((criterion,))
    refit = clone(estimator).set_params(**best)
    refit.fit(Xs, ys) if needs_y else refit.fit(Xs)
    return Selection(criterion, table, best, refit)


def _choices(estimator, Xs, ys, settings, criteria, n_samples, n_folds, trim, random_state):
    """``([(best setting, scores), ...], differ)`` over the grid ``settings``, one pair for each of ``criteria``
    (lower scores are better): ``("cv",)``, or information criteria, which share each setting's fit; ``differ``
    (settings,): whether each fit left some client's component off the consensus (None for ``"cv"``)."""
    if criteria == ("cv",):
        folds = client_folds(n_samples, n_folds, check_random_state(random_state))
        # (settings, K'): the clients with held-out samples (a client with one keeps it for training, client_fold)
        client_scores = np.array([_held_out(clone(estimator).set_params(**params), Xs, ys, folds, n_folds)
                                  for params in settings])[:, n_samples > 1]
        fewest_first = np.argsort([s["n_components"] for s in settings], kind="stable")
        return [(settings[fewest_first[one_standard_error(client_scores[fewest_first], trim)]],
                 np.array([-trimmed_mean(c, trim) for c in client_scores]))], None
    fits = [_information(clone(estimator).set_params(**params), Xs, ys, criteria) for params in settings]
    scores = np.array([scores for scores, _ in fits])
    if np.isnan(scores).all():
        raise ValueError(f"Every setting's fit has singular components (fewer samples than a component's own "
                         f"variance needs), so none has a {' or '.join(c.upper() for c in criteria)}: try fewer "
                         "components, a simpler covariance_type or noise model, or criterion='cv'.")
    return [(settings[int(np.nanargmin(column))], column) for column in scores.T], np.array([d for _, d in fits])


def _information(model, Xs, ys, criteria):
    """``(scores, differ)``: the information ``criteria`` of one setting's fit (lower is better; NaN where it has
    singular components), and whether the fit left some client's component off the consensus (``pooled_``)."""
    args = (Xs, ys) if ys is not None else (Xs,)
    with warnings.catch_warnings():  # reported as a missing score instead
        warnings.simplefilter("ignore", SingularComponentWarning)
        model.fit(*args)
    scores = [np.nan if model.singular_components_.any() else getattr(model, name)(*args) for name in criteria]
    return scores, not getattr(model, "pooled_", np.ones(1, dtype=bool)).all()


def _held_out(model, Xs, ys, folds, n_folds):
    """Each client's mean held-out log-likelihood per sample (K,) over the ``folds`` of one setting."""
    args = (Xs, ys) if ys is not None else (Xs,)
    held_out = [np.zeros(len(Xk)) for Xk in Xs]
    for v in range(n_folds):
        train = [f != v for f in folds]
        test = [f == v for f in folds]
        fit_args = [[a[m] for a, m in zip(arg, train)] for arg in args]
        model.fit(*fit_args)
        for k, m in enumerate(test):
            if m.any():
                held_out[k][m] = model.score_samples(*(arg[k][m] for arg in args), client=model.client_ids_[k])
    return np.array([h.mean() for h in held_out])
