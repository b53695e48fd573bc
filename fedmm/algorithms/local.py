"""Single-task baselines: local EM and local gradient EM (FedGrEM Sec. 4.1).

Nothing crosses the client/server boundary but each client's own estimate,
which the server sends straight back: every client runs its own algorithm on
its own data, which is the single-task rate ``R^2 sqrt(d / n)`` that
federation has to beat (Sec. 3.3, after Cor. 3.9).
"""

from ..families import MixtureParams
from ..protocol import Broadcast
from ._base import GradientStrategy, Strategy, em_update


def echo(messages):
    """Every client keeps what it computed: the broadcast of a server that does nothing."""
    return Broadcast(MixtureParams(messages.weights, messages.theta, messages.scale))


class LocalEM(Strategy):
    """Local EM: E-step and closed-form M-step on each client (``method="local-em"``). No options."""

    name = "local-em"
    client_server = False
    local = True

    def local_update(self, family, stats, state, n_k):
        return em_update(family, stats, n_k)

    def server_step(self, messages, state, t):
        return echo(messages), state


class LocalGrEM(GradientStrategy):
    __doc__ = f"""Local gradient EM: E-step and one gradient M-step on each client (``method="local-grem"``).

    Parameters
    ----------
    {GradientStrategy.__doc__.split("----------")[1].strip()}
    """

    name = "local-grem"
    client_server = False
    local = True

    def server_step(self, messages, state, t):
        return echo(messages), state
