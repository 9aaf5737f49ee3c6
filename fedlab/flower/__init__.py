"""Every fedlab algorithm as a Flower app (Message API): ``pip install 'fedlab-sam[flower]'``.

The server rules run in a Flower ``Strategy`` (:mod:`~fedlab.flower.server`), the local steps in a
ClientApp that keeps the client's state in ``context.state`` (:mod:`~fedlab.flower.client`); what
travels is exactly fedlab's broadcast and upload (:mod:`~fedlab.flower.protocol`). Flower is imported
only inside this package; the rest of fedlab never needs it. Usage: the book's guide ``flower.md``.
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
from fedlab.flower.protocol import Traffic, config_from_run_config
from fedlab.flower.server import FedlabStrategy, RoundRecord, make_server_app
from fedlab.flower.simulation import FlowerRun, run_flower_experiments, run_flower_simulation

__all__ = [
    "ClientStateError", "FedlabClient", "FedlabStrategy", "FlowerRun", "RoundRecord", "Traffic",
    "config_from_run_config", "make_client_app", "make_server_app", "run_flower_experiments",
    "run_flower_simulation",
]
