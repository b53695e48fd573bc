"""A ready Flower app: ``ServerApp`` and ``ClientApp`` for ``flwr run`` (``docs/flower.md``).

The project's ``pyproject.toml`` names them::

    [tool.flwr.app.components]
    serverapp = "fedmm.flower.app:server"
    clientapp = "fedmm.flower.app:client"

Clients read their rows as :func:`fedmm.flower.client.load_from_config` says. The server fits the
estimator the run config describes and saves it with joblib at ``out``:

=================  ========================================================  ============
run config key     meaning                                                   default
=================  ========================================================  ============
``model``          a name of :data:`fedmm.estimators.MODELS` (``"gmm"``,      ``"gmm"``
                   ``"mor"``, or a model of your own)
``n-components``   ``n_components``                                          5
``method``         a client-server method                                    ``"fedgrem"``
``method-options`` the method's own options, as a JSON object                ``"{}"``
``init``           the start (every start runs across parties)              ``"auto"``
``random-state``   ``random_state``                                          0
``settings``       further estimator arguments, as a JSON object              ``"{}"``
``timeout``        seconds to wait for one query's replies (0: no limit)     0
``min-clients``    the fewest clients a round may hear                       1
``progress``       print a line per query (what it asked, who replied)       ``false``
``privacy``        :class:`fedmm.privacy.DifferentialPrivacy`'s arguments,   ``""`` (none)
                   as a JSON object (central noise: rounds under SecAgg+)
``out``            where to save the fitted estimator (joblib)               required
=================  ========================================================  ============
"""

import json
import logging
import sys

import joblib
from flwr.serverapp import ServerApp

from ..estimators import get_model
from ..methods import METHODS
from ..privacy import DifferentialPrivacy
from .client import client_app
from .server import fit

__all__ = ["server", "client", "estimator_from_config", "PYPROJECT"]

#: The ``pyproject.toml`` of a Flower app project that runs fedmm's apps (``flwr run``).
PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedmm-flower-demo"
version = "1.0.0"
description = "fedmm's Flower demo"
license = "BSD-3-Clause"
# fedmm itself comes from the environment that runs flwr (flwr run installs the rest in isolation).
dependencies = ["flwr[simulation]>=1.41"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "fedmm"

[tool.flwr.app.components]
serverapp = "fedmm.flower.app:server"
clientapp = "fedmm.flower.app:client"

# Every key the run config may override (fedmm.flower.app's table), with its default.
[tool.flwr.app.config]
out = "model.joblib"
data-dir = "data"
model = "gmm"
n-components = 5
method = "fedgrem"
method-options = "{}"
init = "auto"
random-state = 0
settings = "{}"
timeout = 0
min-clients = 1
progress = false
privacy = ""
"""

client = client_app()
server = ServerApp()


def estimator_from_config(run_config):
    """The unfitted estimator a run config describes (the table above)."""
    cls = get_model(str(run_config.get("model", "gmm")))
    options = json.loads(str(run_config.get("method-options", "{}")))
    method = METHODS[str(run_config.get("method", "fedgrem"))](**options)
    privacy = str(run_config.get("privacy", ""))
    privacy = DifferentialPrivacy(**json.loads(privacy)) if privacy else None
    return cls(int(run_config.get("n-components", 5)), method=method,
               init=str(run_config.get("init", "auto")), random_state=int(run_config.get("random-state", 0)),
               **({} if privacy is None else {"privacy": privacy}), **json.loads(str(run_config.get("settings", "{}"))))


@server.main()
def main(grid, context):
    config = context.run_config
    if config.get("progress", False):
        # Printed lines reach ``flwr run --stream``: the server's log, one line per query (fedmm.flower.server).
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logging.getLogger("fedmm.flower").addHandler(handler)
        logging.getLogger("fedmm.flower").setLevel(logging.INFO)
    timeout = float(config.get("timeout", 0)) or None
    model = fit(estimator_from_config(config), grid, timeout=timeout, min_clients=int(config.get("min-clients", 1)))
    joblib.dump(model, str(config["out"]))
