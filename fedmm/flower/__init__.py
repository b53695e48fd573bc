"""fedmm across separate parties on Flower (``pip install "fedmm[flower]"``; ``docs/flower.md``).

Every client is a Flower ``ClientApp`` that reads its own data and answers the server's queries with
the messages of :mod:`fedmm.protocol`; the server is a ``ServerApp`` whose main loop runs fedmm's own
engine (:mod:`fedmm.engine`) and starts (:mod:`fedmm.initialization`) over a transport,
:class:`FlowerClients`, that sends those queries through Flower's ``Grid`` and checks every reply
before the fit sees it. The numbers are those of the same fit in one process.

- :func:`client_app`: the ``ClientApp`` (data from the node's config, or a callable of yours);
- :func:`fit`: fit an estimator over a ``Grid``, in a ``ServerApp``'s main;
- :class:`fedmm.flower.testing.LocalGrid`: a ``Grid`` in this process, for tests and teaching.
"""

try:
    import flwr  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ImportError("fedmm.flower needs Flower: pip install \"fedmm[flower]\" (flwr 1.x).") from error

from .client import client_app
from .server import ClientsRejected, FlowerClients, fit

__all__ = ["client_app", "fit", "FlowerClients", "ClientsRejected"]
