"""Every fedlab algorithm as a Flower app (Message API): ``pip install 'fedlab-sam[flower]'``.

* :mod:`fedlab.flower.server` — :class:`FedlabStrategy` (a ``flwr.serverapp.strategy.Strategy``)
  runs ``server_init`` / ``broadcast`` / ``aggregate``; :func:`make_server_app` wraps it in a ServerApp.
* :mod:`fedlab.flower.client` — :func:`make_client_app`: a ClientApp that runs ``local_step`` and
  ``upload`` and keeps the client's persistent state in Flower's ``context.state``.
* :mod:`fedlab.flower.protocol` — what travels (exactly fedlab's broadcast and upload) and how.
* :mod:`fedlab.flower.simulation` — :func:`run_flower_simulation` with Flower's simulation engine.
* :mod:`fedlab.flower.app` — module-level apps for ``flwr run`` (config from the run config).

Flower is imported only inside this package; the rest of fedlab never needs it.
"""
from __future__ import annotations

try:
    import flwr  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fedlab.flower needs Flower with its simulation engine, the optional extra [flower]: "
        "pip install -e '.[flower]'  (flwr[simulation]==1.42.0)"
    ) from err

from fedlab.flower.client import ClientStateError, FedlabClient, make_client_app
from fedlab.flower.protocol import Traffic, check_servable, config_from_run_config, servable_algorithms
from fedlab.flower.server import FedlabStrategy, RoundRecord, make_server_app
from fedlab.flower.simulation import FlowerRun, run_flower_experiments, run_flower_simulation

__all__ = [
    "ClientStateError", "FedlabClient", "FedlabStrategy", "FlowerRun", "RoundRecord", "Traffic",
    "check_servable", "config_from_run_config", "make_client_app", "make_server_app",
    "run_flower_experiments", "run_flower_simulation", "servable_algorithms",
]
