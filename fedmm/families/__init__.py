"""Component families: the statistics of one component model ``p_r(.; theta)``."""

from ._base import Family, MixtureParams, pool_stats
from .gaussian import GaussianFamily, GaussianStats
from .regression import RegressionFamily, RegressionStats

__all__ = ["Family", "MixtureParams", "pool_stats", "GaussianFamily", "GaussianStats",
           "RegressionFamily", "RegressionStats"]
