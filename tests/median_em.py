"""A method written outside fedmm, in one file, with no edit to fedmm: the example of docs/extending.md.

Median FedEM: every client takes FedEM's closed-form M-step, and the server shares the coordinate-wise
median of the clients' component parameters and variances instead of their average, so that one client
cannot move the shared components by itself (FedEM's average follows it anywhere). It opts into differential
privacy (``fedmm.privacy``) with its private form: under local noise its server takes the median of the clients'
noisy updates.
"""

import numpy as np

from fedmm.families import MixtureParams
from fedmm.methods import Method, PrivateForm, constraints, em_update
from fedmm.protocol import Broadcast


def median_centre(updates, share, clip):
    """The coordinate-wise median of the clients' noisy updates (K, m): the server's point under local noise."""
    return np.median(updates, axis=0)


class MedianEM(Method):
    """Median FedEM (``method=MedianEM()``).

    Parameters
    ----------
    trim : float in [0, 0.5), default=0.0
        The fraction of clients left out at each end before the median is taken (0: the plain median).
    """

    name = "median-em"                      # how Flower clients know it: client_app(methods=[MedianEM])
    _parameter_constraints = {"trim": constraints.real(0.0, 0.5, high_open=True)}
    per_client = False                      # its clients end with shared components, fitted together
    shares_components = True
    default_init = "local-em"               # each client's own EM start, labels aligned
    ascent = False

    def __init__(self, trim=0.0):
        self.trim = trim

    def local_update(self, family, stats, state, n_k):
        return em_update(family, stats, n_k)

    def server_step(self, messages, state, t):
        K = len(messages.n)
        cut = int(self.trim * K)
        keep = slice(cut, K - cut)
        theta = np.sort(messages.theta, axis=0)[keep]
        scale = np.sort(messages.scale, axis=0)[keep]
        theta, scale = np.median(theta, axis=0), np.median(scale, axis=0)
        shared = MixtureParams(messages.weights, np.broadcast_to(theta, messages.theta.shape).copy(),
                               np.broadcast_to(scale, messages.scale.shape).copy())
        return Broadcast(shared), theta

    def diagnostics(self, state):
        return state

    def center(self, diagnostics):
        return diagnostics

    def private(self, unit):                # runs under privacy=DifferentialPrivacy(...) at either unit
        return PrivateForm(centre=median_centre)
