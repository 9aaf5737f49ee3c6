"""The simulation engine: client sampling, local work, aggregation, evaluation, resume."""
from fedlab.data.holdout import hold_out_validation
from fedlab.engine.loop import Simulation, run
from fedlab.engine.setup import build_dataset, build_partition
from fedlab.engine.sampling import load_schedule, sample_clients
from fedlab.engine.schedule import learning_rate

__all__ = ["Simulation", "build_dataset", "build_partition", "hold_out_validation", "learning_rate", "load_schedule", "run",
           "sample_clients"]
