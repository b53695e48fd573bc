"""FedGrEM with the options that did not earn a place in its API, to reproduce the research record.

- ``centre_margins=True``: every client's component enters the central problem scaled by its margin
  (:meth:`fedmm.algorithms.fedgrem.FedGrEM._with_margins`); helps where clients are alike or
  label-skewed, costs where a client's component truly differs towards another's, and does not always
  settle (``docs/fedgrem.md``, "Centre margins").
- ``shrinkage="linear"``: empirical Bayes shrinkage of every client's component towards the centre
  (:func:`fedmm.algorithms.central.linear_shrinkage`); better on the paper's simulated designs, not on real data
  (``docs/fedgrem.md``, "Linear shrinkage").
- ``pooling_sizes="component"``: each component's effective size ``n_k w_kr^[0] R`` in the central
  problem, thresholds included (:meth:`fedmm.algorithms.fedgrem.FedGrEM._sizes`).

``validation/fedgrem_options.py`` measures them against the defaults. They were measured with one centre, so
``n_centers`` defaults to 1 here (the margins read a single centre).
"""

from fedmm import _params as P
from fedmm.algorithms.fedgrem import POOLING_SIZES, SHRINKAGES
from fedmm.methods import FedGrEM


class ExperimentalFedGrEM(FedGrEM):
    """:class:`fedmm.methods.FedGrEM` and the experiments above (not on Flower: it has no ``name``)."""

    name = None
    _parameter_constraints = {**FedGrEM._parameter_constraints, "pooling_sizes": P.one_of(*POOLING_SIZES),
                              "centre_margins": P.boolean, "shrinkage": P.one_of(*SHRINKAGES)}

    def __init__(self, C_eta=1.0, eta_rule="safeguarded", penalty="sure-floored", penalty_params=None,
                 center_restarts=1, pooling_sizes="information", pool_variances=True, central_tol=1e-10,
                 central_max_iter=1000, n_centers=1, reweighting=True, participation=1.0, dropout=0.0,
                 centre_margins=False, shrinkage="soft"):
        super().__init__(C_eta=C_eta, eta_rule=eta_rule, penalty=penalty, penalty_params=penalty_params,
                         center_restarts=center_restarts, pooling_sizes=pooling_sizes, pool_variances=pool_variances,
                         central_tol=central_tol, central_max_iter=central_max_iter, participation=participation,
                         dropout=dropout, n_centers=n_centers, reweighting=reweighting)
        self.centre_margins = centre_margins
        self.shrinkage = shrinkage
