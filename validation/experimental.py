"""FedGrEM with the options that did not earn a place in its API, to reproduce the research record.

- ``centre_margins=True``: every client's component enters the central problem scaled by its margin
  (:meth:`ExperimentalFedGrEM._with_margins`); helps where clients are alike or
  label-skewed, costs where a client's component truly differs towards another's, and does not always
  settle (``docs/fedgrem.md``, "Centre margins").
- ``shrinkage="linear"``: empirical Bayes shrinkage of every client's component towards the centre
  (:func:`fedmm.algorithms.central.linear_shrinkage`); better on the paper's simulated designs, not on real data
  (``docs/fedgrem.md``, "Linear shrinkage").
- ``pooling_sizes="component"``: each component's effective size ``n_k w_kr^[0] R`` in the central
  problem, thresholds included (:meth:`ExperimentalFedGrEM._sizes`).

They enter FedGrEM's round through its one hook for them, ``FedGrEM._refined`` (and ``_sizes``).

``validation/fedgrem_options.py`` measures them against the defaults. They were measured with one centre, so
``n_centers`` defaults to 1 here (the margins read a single centre).
"""

import numpy as np

from fedmm import _params as P
from fedmm.algorithms.central import central_update, centre_margin, linear_shrinkage
from fedmm.methods import FedGrEM

POOLING_SIZES = ("client", "component", "information")
SHRINKAGES = ("soft", "linear")
#: The least margin a block enters the central problem with (:meth:`ExperimentalFedGrEM._with_margins`): relative
#: to its size, so that a component every client holds on another's centre still has a centre (their plain mean).
MARGIN_FLOOR = 1e-12
#: The share of the clients left out of the clients' spread (``shrinkage="linear"``,
#: :func:`fedmm.algorithms.central.between_variance`): the theory's bound on the adversaries' share, ``eps < 1/3``
#: (Theorem A.8). With 20% (``fedmm.robust.TRIM``), the third of three adversaries in ten clients stayed in,
#: the spread grew, and the honest clients pooled less (``tests/test_adversarial.py``, "shift": 0.41).
SPREAD_TRIM = 1.0 / 3.0


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

    def _refined(self, central, theta, sizes, weights, lam, solve, N):
        """The paper's solution, then (not at ``lambda = inf``) the centre margins and the linear shrinkage, each
        block's noise that of its pass's start (``N = n_k w^[0]``), like its step and its weight in the centre."""
        margin = 1.0
        if self.centre_margins and np.isfinite(lam):
            central, margin = self._with_margins(central, theta, sizes, weights, lam, solve)
        if self.shrinkage == "linear" and np.isfinite(lam):
            central = linear_shrinkage(central, theta, N, solve["metric"], SPREAD_TRIM)
        return central, margin

    def _with_margins(self, central, theta, sizes, weights, lam, solve):
        """The central problem solved again with every block's size and weight scaled by its margin
        (:func:`fedmm.algorithms.central.centre_margin`) at the first solution's centres.

        fedmm's, beyond the paper. The central problem (Algorithm 1; App. B.1, eq. (6)) treats
        ``theta_tilde_kr`` as client ``k``'s estimate of component ``r``; one that has drifted towards
        another component's centre (a component the client barely has, taken over by the samples of a
        neighbour: label-skewed clients) is not evidence that the client's component ``r`` differs, and the paper's threshold
        would let it keep that estimate, which the next E-step reinforces. Scaled by its margin ``m``,
        such a block counts ``m`` times its weight in the centre and is pooled at ``1 / sqrt(m)`` times
        its threshold: at ``m = 0`` it counts for nothing and is pooled onto its own component's
        centre. A far block's pull on the centre, weight times threshold, shrinks as ``sqrt(m)``, so
        an outlier client's is bounded as before. Continuous in the estimates (a hard switch at
        ``m = 0`` made blocks on the boundary flip every few rounds: sklearn's digits, 1,000 rounds
        unconverged). Not applied at ``lambda = inf``, where every block is pooled and the centre is
        the paper's gradient FedEM average (Sec. 2.3).

        Each block counts by its margin in the pooled variance too (:func:`pool_variances`): counted in
        full, an adversary pooled onto the honest centres brought its variance into theirs and merged two
        honest components (``tests/test_adversarial.py``, "shift": error 44.9 against 0.12). Off by
        default: it costs adaptivity where clients truly differ, and the rounds do not always settle
        (``docs/fedgrem.md``, "Centre margins").
        """
        margin = np.maximum(centre_margin(theta, central.center, solve["metric"]), MARGIN_FLOOR)
        if (margin == 1.0).all():
            return central, margin
        blocks = np.broadcast_to(np.reshape(sizes, (len(theta), -1)), margin.shape)
        weights = blocks if weights is None else weights
        return central_update(theta, blocks * margin, lam, **{**solve, "weights": weights * margin}), margin

    def _sizes(self, n_k, w0):
        """``n_k``, or with ``"component"`` each component's effective size ``n_k w_kr`` (the information in
        ``theta_tilde_kr``) times ``R``, so that uniform proportions give the paper's ``n_k``, at the pass's
        starting weights ``w0``. Not at the current weights: a component pooled onto a centre away from its
        own data loses weight, its threshold ``lambda / sqrt(n_k w_kr R)`` grows and pools it harder, and
        the component dies (mixtures of regressions at ``h = 2``, ``docs/fedgrem.md``); the gradient step
        is sized by the start's weights for the same reason (:func:`fedmm.algorithms._base.step_sizes`)."""
        if self.pooling_sizes == "component":
            return n_k[:, None] * w0 * w0.shape[1]
        return n_k
