"""fedlab's Flower apps (fedlab.flower) against fedlab's own engine.

One Flower simulation (Ray backend, 4 virtual SuperNodes) runs eleven methods one after another
(``run_flower_experiments``: one Ray and actor start-up instead of eleven), each 3 rounds with a fixed
client schedule; the engine runs the same Configs. Claims: the final θ is bit-identical (tolerance 0: the
same float32 operations in the same order, arrays serialised losslessly), and the array bytes in
the Messages, both directions, are 4 × the floats fedlab's accounting counts.
"""
from __future__ import annotations

import json

import pytest
import torch

flwr = pytest.importorskip("flwr", reason="needs the [flower] extra: pip install -e '.[flower]'")

from flwr.app import ConfigRecord, Context, Error, Message, MessageType, RecordDict  # noqa: E402

from fedlab import Config  # noqa: E402
from fedlab.config import ConfigError  # noqa: E402
from fedlab.engine import Simulation  # noqa: E402
from fedlab.flower import (  # noqa: E402
    ClientStateError, FedlabClient, FedlabStrategy, config_from_run_config,
    run_flower_experiments,
)
from fedlab.flower.protocol import BROADCAST, ROUND, UPLOAD, from_record, round_info, to_record  # noqa: E402

METHODS = ("fedavg", "scaffold", "feddyn", "fedsam", "fedsmoo", "fednsam", "fedvssam", "fedwmsam", "fedgloss",
           "fedgmt", "fedsol")
# Client 0 takes part in rounds 0 and 2, client 1 in 1 and 2, client 3 in 1 and 2: the stateful
# methods must carry c_i / h_i / μ_i across a skipped round; m varies (2, 3, 3).
SCHEDULE = [[0, 2], [1, 2, 3], [0, 1, 3]]


def _config(tmp_path, algorithm: str, **overrides) -> Config:
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(SCHEDULE))
    values = dict(algorithm=algorithm, dataset="digits", model="mlp", n_clients=4, rounds=3, local_steps=3,
                  batch_size=16, lr=0.05, partition="dirichlet", alpha=0.5, sampling="schedule",
                  schedule_path=str(path), eval_every=3, runs_dir=str(tmp_path / "runs"))
    values.update(overrides)
    return Config(**values)


@pytest.mark.usefixtures("ray_turn")  # a Ray of its own: never beside another test's cluster
def test_flower_simulation_matches_the_engine_bit_for_bit_and_byte_for_byte(tmp_path):
    """Eleven methods in one Flower simulation (one test, so that pytest-xdist starts Ray once).

    Per method: the clients of every round are the schedule's; the final θ equals the engine's
    exactly (tolerance 0); per round and direction, the array payload in the Messages is 4 × the
    floats fedlab counts (``uplink_floats`` / ``downlink_floats`` of the engine's metrics).
    """
    configs = {name: _config(tmp_path, name) for name in METHODS}
    engine = {name: Simulation.build(cfg).run(progress=False) for name, cfg in configs.items()}
    import ray

    ours = not ray.is_initialized()
    try:
        flower = run_flower_experiments(configs, num_cpus=1)
    finally:
        if ours:  # leave a Ray that someone else started alone
            ray.shutdown()
    problems = []
    for name in METHODS:
        result, run = engine[name], flower[name]
        assert result.status == "finished"
        if [r.clients for r in run.rounds] != SCHEDULE:
            problems.append(f"{name}: clients {[r.clients for r in run.rounds]} != schedule {SCHEDULE}")
        if not torch.equal(run.theta, result.theta):
            problems.append(f"{name}: final θ differs, max |Δθ| = {float((run.theta - result.theta).abs().max()):g}")
        assert len(run.rounds) == len(result.metrics) == 3
        for rec, (_, row) in zip(run.rounds, result.metrics.iterrows()):
            measured = (rec.uplink.payload_bytes, rec.downlink.payload_bytes)
            counted = (4 * int(row["uplink_floats"]), 4 * int(row["downlink_floats"]))
            if measured != counted:
                problems.append(f"{name} round {rec.round}: (up, down) bytes carried {measured} != 4 × floats {counted}")
            # numpy.save adds a header per array: the serialised bytes exceed the payload
            assert rec.uplink.serialized_bytes > rec.uplink.payload_bytes
    assert not problems, "\n".join(problems)
    # What travels is the method's own message: SCAFFOLD sends (θ, c) down and (Δ, Δc) up, twice
    # FedAvg's traffic; FedDyn keeps h_i at home and sends what FedAvg sends.
    avg, scaf, dyn = flower["fedavg"], flower["scaffold"], flower["feddyn"]
    assert scaf.uplink.floats == 2 * avg.uplink.floats and scaf.downlink.floats == 2 * avg.downlink.floats
    assert dyn.uplink.floats == avg.uplink.floats and dyn.downlink.floats == avg.downlink.floats


@pytest.mark.usefixtures("ray_turn")  # a Ray of its own: never beside another test's cluster
def test_flower_sim_stores_its_run_as_run_does(tmp_path, capsys):
    """`flower-sim` and `run` on the same flags (their defaults are Config's) leave the same run folder: the same
    files, metric columns, summary keys and config record, under the same run key (the Flower run in
    RUNS_DIR/flower/), and the same numbers but wall time and flatness_distance, NaN for Flower (each
    client's final model never travels). Both hand their rounds to the tracker under the run's name."""
    import pandas as pd
    import ray
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fedlab.cli import main
    from fedlab.tracking import run_name

    flags = ["--dataset", "digits", "--model", "mlp", "--n-clients", "4", "--participation", "0.5", "--rounds", "2",
             "--local-steps", "2", "--batch-size", "16", "--client-eval", "--client-eval-size", "20",
             "--runs-dir", str(tmp_path), "--log", "tensorboard"]
    ours = not ray.is_initialized()
    try:
        assert main(["flower-sim", *flags]) == 0
    finally:
        if ours:
            ray.shutdown()
    assert main(["run", *flags, "--no-progress"]) == 0
    out = capsys.readouterr().out
    (engine,), (flower,) = tmp_path.glob("fedavg-*"), (tmp_path / "flower").glob("fedavg-*")
    assert flower.name == engine.name and out.count("status    finished after 2/2 rounds") == 2
    assert sorted(p.name for p in flower.iterdir()) == sorted(p.name for p in engine.iterdir())
    ours_m, theirs = pd.read_csv(flower / "metrics.csv"), pd.read_csv(engine / "metrics.csv")
    assert list(ours_m.columns) == list(theirs.columns) and "client_acc_mean" in ours_m and len(ours_m) == 2
    same = [c for c in theirs.columns if c not in ("wall_seconds", "flatness_distance")]
    pd.testing.assert_frame_equal(ours_m[same], theirs[same])
    assert ours_m["flatness_distance"].isna().all()
    summaries = [json.loads((d / "summary.json").read_text()) for d in (flower, engine)]
    assert summaries[0].keys() == summaries[1].keys()
    assert summaries[0]["final_test_acc"] == summaries[1]["final_test_acc"]
    assert json.loads((flower / "config.json").read_text()) == json.loads((engine / "config.json").read_text())
    config = Config.from_dict(json.loads((engine / "config.json").read_text())["config"])
    for root in (tmp_path / "flower", tmp_path):
        events = EventAccumulator(str(root / "tensorboard" / run_name(config)))
        events.Reload()
        assert [e.step for e in events.Scalars("train_loss")] == [1, 2], root


@pytest.mark.usefixtures("ray_turn")  # a Ray of its own: never beside another test's cluster
def test_flower_run_exits_with_the_runs_failure_and_leaves_no_process(monkeypatch, capsys):
    """`flwr run . local` exits 0 once a run is submitted and keeps its SuperLink running; `flower-run` waits
    for the run (here one that fails inside the ServerApp: its schedule file is missing), exits 1 naming
    Flower's status and the error, and no process it started (SuperLink, SuperExec, the simulation) is left."""
    import fedlab.flower.launch as launch
    from fedlab.cli import main

    runs, original = [], launch.run_local

    def recorded(*args):
        runs.append(original(*args))
        return runs[-1]

    monkeypatch.setattr(launch, "run_local", recorded)
    code = main(["flower-run", "--run-config", "sampling='schedule' schedule-path='/nonexistent/s.json' rounds=1"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 1 and "ended finished:failed" in err and "schedule_path='/nonexistent/s.json'" in err, err
    (run,) = runs
    assert run.run_id is not None and len(run.processes) >= 2  # the SuperLink and what it started (SuperExec, ...)
    assert not [pid for pid in run.processes if launch.alive(pid)]


def test_flower_run_refuses_a_bad_run_config_before_anything_starts(capsys):
    from fedlab.cli import main

    assert main(["flower-run", "--run-config", "algorithm='fedfoo'"]) == 2
    assert "unknown algorithm 'fedfoo'; allowed:" in capsys.readouterr().err


# --- bad input (no Ray) -----------------------------------------------------------------------------
def test_unknown_algorithm_names_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"unknown algorithm 'fedfoo'; allowed: .*fedvssam"):
        config_from_run_config({"algorithm": "fedfoo"})


def test_run_config_maps_onto_config_fields():
    cfg = config_from_run_config({"algorithm": "fedsam", "n-clients": 4, "algorithm-params": '{"rho": 0.02}',
                                  "train-size": ""})
    assert (cfg.algorithm, cfg.n_clients, cfg.algorithm_params, cfg.train_size) == ("fedsam", 4, {"rho": 0.02}, None)
    with pytest.raises(ConfigError, match="unknown config field.*n_cleints"):
        config_from_run_config({"n-cleints": 4})


@pytest.fixture
def flower_task(monkeypatch):
    """Act as a Flower task (run 1, node 0): Messages read their sender's identity from it."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


def _train_message(sim: Simulation, t: int, client: int, last_round: int) -> Message:
    clients = SCHEDULE[t]
    msg = sim.algorithm.broadcast(sim.algorithm.server_init(sim.model.theta0()), round_info(sim, t, clients))
    rnd = ConfigRecord({"round": t, "client": client, "clients": clients, "last-round": last_round})
    return Message(RecordDict({BROADCAST: to_record(msg), ROUND: rnd}), dst_node_id=7,
                   message_type=MessageType.TRAIN)


def _context(client: int) -> Context:
    return Context(run_id=1, node_id=7, node_config={"partition-id": client, "num-partitions": 4},
                   state=RecordDict(), run_config={})


def test_stateful_client_without_its_state_gives_a_clear_error(tmp_path, flower_task):
    cfg = _config(tmp_path, "scaffold")
    sim, client, ctx = Simulation.build(cfg), FedlabClient(cfg), _context(0)
    reply = client.train(_train_message(sim, 0, 0, -1), ctx)  # round 0: starts from client_init
    assert set(reply.content.array_records[UPLOAD]) == {"delta", "delta_c"}
    assert "fedlab.client-state" in ctx.state  # c_i stays on the client
    client.train(_train_message(sim, 2, 0, 0), ctx)  # round 2 with the state kept since round 0
    with pytest.raises(ClientStateError, match=r"from round 2, but the server expects .* round 0"):
        client.train(_train_message(sim, 2, 0, 0), ctx)  # stale: the state is from round 2 now
    with pytest.raises(ClientStateError, match=r"client 0 took part in round 0 but holds no scaffold client "
                                               r"state \(c_i\)"):
        client.train(_train_message(sim, 2, 0, 0), _context(0))  # a restarted node: empty Context
    with pytest.raises(ClientStateError, match="never took part"):
        client.train(_train_message(sim, 0, 0, -1), ctx)


def test_stateless_client_needs_no_state(tmp_path, flower_task):
    cfg = _config(tmp_path, "fedsam")
    sim, ctx = Simulation.build(cfg), _context(0)
    FedlabClient(cfg).train(_train_message(sim, 2, 0, 0), ctx)  # joins late with no state: fine
    assert "fedlab.client-state" not in ctx.state


def test_fedgf_client_round_matches_the_engine(tmp_path, flower_task):
    """FedGF's message carries a scalar (c) beside two vectors: the ClientApp's round-0 upload of
    client 0 is the engine's, bit for bit, and 4 bytes per float it counts (no Ray)."""
    cfg = _config(tmp_path, "fedgf")
    sim = Simulation.build(cfg)
    reply = FedlabClient(cfg).train(_train_message(sim, 0, 0, -1), _context(0))
    state = sim.initial_state()
    (engine,) = [r for r in sim.train_round(state, 0).results if r.client == 0]
    upload = from_record(reply.content.array_records[UPLOAD])
    assert set(upload) == set(engine.upload)
    for key, value in engine.upload.items():
        assert torch.equal(upload[key], value), key
    msg = sim.algorithm.broadcast(sim.algorithm.server_init(sim.model.theta0()), round_info(sim, 0, SCHEDULE[0]))
    assert all(v.dtype == torch.float32 for v in msg.values())  # the scalar travels as one float


@pytest.mark.parametrize("name", ["fedgmt", "fedsol"])
def test_distilling_client_round_matches_the_engine(name, tmp_path, flower_task):
    """FedGMT and FedSOL call the model's oracle with a teacher (FedGMT's θ̃ travels beside θ): the
    ClientApp's round-0 upload of client 0 is the engine's, bit for bit (no Ray)."""
    cfg = _config(tmp_path, name)
    sim = Simulation.build(cfg)
    reply = FedlabClient(cfg).train(_train_message(sim, 0, 0, -1), _context(0))
    (engine,) = [r for r in sim.train_round(sim.initial_state(), 0).results if r.client == 0]
    upload = from_record(reply.content.array_records[UPLOAD])
    assert set(upload) == set(engine.upload) == {"delta"}
    for key, value in engine.upload.items():
        assert torch.equal(upload[key], value), key
    assert not torch.equal(upload["delta"], torch.zeros_like(upload["delta"]))


def test_client_checks_its_partition_and_the_experiment(tmp_path, flower_task):
    cfg = _config(tmp_path, "fedavg")
    sim = Simulation.build(cfg)
    with pytest.raises(ValueError, match=r"num-partitions=5 does not fit n_clients=4"):
        bad = Context(run_id=1, node_id=7, node_config={"partition-id": 0, "num-partitions": 5},
                      state=RecordDict(), run_config={})
        FedlabClient(cfg).train(_train_message(sim, 0, 0, -1), bad)
    with pytest.raises(ValueError, match="sent client 2's round to node 7, which is client 0"):
        FedlabClient(cfg).train(_train_message(sim, 0, 2, -1), _context(0))
    with pytest.raises(ValueError, match=r"experiment None; this ClientApp serves: a, b"):
        FedlabClient({"a": cfg, "b": cfg}).train(_train_message(sim, 0, 0, -1), _context(0))


def test_server_reports_a_failed_client_by_name(tmp_path, flower_task):
    cfg = _config(tmp_path, "scaffold")
    strategy = FedlabStrategy(Simulation.build(cfg))
    strategy.node_of = {i: 10 + i for i in range(4)}
    sent = strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid=None)
    assert [m.metadata.dst_node_id for m in sent] == [10, 12]
    replies = [Message(Error(code=0, reason="client 2 took part in round 0 but holds no state"), reply_to=m)
               for m in sent]
    with pytest.raises(RuntimeError, match=r"node 10 failed in round 1 \(client 0\): client 2 took part"):
        strategy.aggregate_train(1, replies)


def test_a_field_a_simulation_does_not_honour_is_refused_before_ray(tmp_path):
    from fedlab.flower import run_flower_simulation

    for field, value in (("client_threads", 2), ("checkpoint_every", 1), ("parallel_clients", "auto")):
        with pytest.raises(ConfigError, match=rf"{field}=.*does not honour it; allowed: "):
            run_flower_simulation(_config(tmp_path, "fedavg", **{field: value}))


def test_personal_models_with_client_eval_are_refused_before_ray(tmp_path):
    from fedlab.flower import run_flower_simulation

    with pytest.raises(ConfigError, match="client_eval=True with algorithm='fedfsa'"):
        run_flower_simulation(_config(tmp_path, "fedfsa", client_eval=True))


def test_flower_sim_cli_rejects_an_unknown_algorithm(capsys):
    from fedlab.cli import main

    assert main(["flower-sim", "--algorithm", "fedfoo"]) == 2
    assert "unknown algorithm 'fedfoo'; allowed:" in capsys.readouterr().err


def test_deploy_app_is_a_valid_flower_app_with_a_valid_fedlab_config():
    """fedlab/flower/deploy/pyproject.toml (what `flwr run` reads) passes Flower's own validation."""
    import tomllib
    from pathlib import Path

    from flwr.common.config import validate_config

    app_dir = Path(__file__).resolve().parent.parent / "fedlab" / "flower" / "deploy"
    project = tomllib.loads((app_dir / "pyproject.toml").read_text())
    assert validate_config(project, check_module=True, project_dir=app_dir) == (True, [], [])
    cfg = config_from_run_config(project["tool"]["flwr"]["app"]["config"])
    assert cfg.algorithm == "fedvssam" and cfg.dataset == "fmnist"


def test_the_node_limit_counts_the_machines_real_cpus_not_the_flag(monkeypatch):
    """--num-cpus 24 on a 2-core machine must not admit 24,000 SuperNodes (issue 46: 50,000 passed on 2 cores)."""
    import fedlab.flower.simulation as sim
    from fedlab.config import ConfigError

    monkeypatch.setattr(sim, "machine_cpus", lambda: 2)
    sim.check_federation_size(2 * sim.NODES_PER_CPU, 2)
    with pytest.raises(ConfigError, match="this machine has 2"):
        sim.check_federation_size(2 * sim.NODES_PER_CPU + 1, 24)
    for bad in (0, -3, True, 1.5):
        with pytest.raises(ConfigError, match="num_cpus"):
            sim.check_federation_size(10, bad)
