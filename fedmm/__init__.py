"""fedmm: mixture models estimated from data split across clients that cannot pool raw data."""

from .data import CopiedClientWarning, EmptyComponentWarning, SingularComponentWarning
from .engine import DivergenceError
from .estimators import ClientMixture, FederatedGaussianMixture, FederatedMixtureRegression
from .selection import select_n_components
from .threads import get_num_threads, set_num_threads

__version__ = "0.1.0"

__all__ = ["FederatedGaussianMixture", "FederatedMixtureRegression", "ClientMixture", "CopiedClientWarning",
           "DivergenceError", "EmptyComponentWarning", "SingularComponentWarning", "get_num_threads", "select_n_components",
           "set_num_threads", "__version__"]
