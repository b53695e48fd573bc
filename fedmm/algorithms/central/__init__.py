"""FedGrEM's robust central update, on the server (FedGrEM Algorithm 1; App. B.1, eq. (6)): the problem with one
centre (:mod:`fedmm.algorithms.central.single`, its solvers and refinements) and with several, the clients assigned
to them (:mod:`fedmm.algorithms.central.grouped`)."""

from .grouped import GroupedResult, grouped_central_update, huber_costs, numbered_by_size
from .single import (CONSISTENT_LEVELS, SOLVERS, CentralResult, between_variance, central_update, centre_margin,
                     linear_shrinkage, on_centre, pooling_share, robust_centre, soft_threshold)
# Importable from here as before the split: validation/bench_load.py times the compiled loop.
from .single import _irls_loop  # noqa: F401

__all__ = ["CentralResult", "central_update", "robust_centre", "soft_threshold", "pooling_share", "centre_margin",
           "between_variance", "linear_shrinkage", "on_centre", "SOLVERS", "CONSISTENT_LEVELS", "GroupedResult",
           "grouped_central_update", "huber_costs", "numbered_by_size"]
