"""The apps ``flwr run`` deploys: the fedlab Config comes from Flower's run config.

A Flower App project points its components here (see ``examples/flower/pyproject.toml``)::

    [tool.flwr.app.components]
    serverapp = "fedlab.flower.app:server_app"
    clientapp = "fedlab.flower.app:client_app"

and sets the Config fields under ``[tool.flwr.app.config]`` (or ``flwr run --run-config``); see
:func:`fedlab.flower.protocol.config_from_run_config`.
"""
from __future__ import annotations

from fedlab.flower.client import make_client_app
from fedlab.flower.server import make_server_app

server_app = make_server_app()
client_app = make_client_app()
