"""Estimation strategies: each a client step and a server step over :mod:`fedmm.protocol`'s messages,
run by :mod:`fedmm.engine`. :mod:`fedmm.methods` lists them by name, as the estimators' ``method=``
takes them.
"""

from ._base import GradientStrategy, Strategy
from .dfedem import DFedEM
from .dfedgrem import DFedGrEM
from .dynamic import DynamicGraph
from .fedem import FedEM
from .federico import FedeRiCo
from .fedgrem import FedGrEM
from .local import LocalEM, LocalGrEM
from .pooled import PooledEM, PooledGrEM
from .sparse import SparseFedGrEM
from .tgmm import TGMM

__all__ = ["Strategy", "GradientStrategy", "FedGrEM", "FedEM", "DFedEM", "DFedGrEM", "FedeRiCo", "DynamicGraph",
           "TGMM", "LocalEM", "LocalGrEM", "PooledEM", "PooledGrEM", "SparseFedGrEM"]
