"""Cost axes: cumulative communication and gradient evaluations against the registry's per-method counts,
rounds-to-target at round resolution, the library's accuracy-vs-cost panels and the lab's figure."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import fedlab  # noqa: E402
from fedlab.algorithms import algorithm_class  # noqa: E402
from fedlab.engine.accounting import communication_vectors  # noqa: E402
from fedlab.sweep import rounds_to_target  # noqa: E402

# fedavg: 1 up, 1 down, 1 gradient a step; fedsam: 2 gradients a step; scaffold: 2x communication;
# fedvssam (a successor): 1 up, 2 down (θ and the global direction h), 2 gradients a step
DECLARED = {"fedavg": (1, 1, 1), "fedsam": (1, 1, 2), "scaffold": (2, 2, 1), "fedvssam": (1, 2, 2)}


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_cumulative_costs_follow_the_registry(tiny, name):
    res = fedlab.run(tiny(algorithm=name, rounds=3), progress=False)
    up, down = communication_vectors(name)
    grads = algorithm_class(name).grad_evals_per_step
    assert (up, down, grads) == DECLARED[name]  # what the registry says is what the papers say
    m, d, k, clients = res.metrics, res.theta.numel(), 3, 4
    t = np.arange(1, 4)
    assert m["grad_evals"].tolist() == [grads * clients * k] * 3
    assert m["cum_grad_evals"].tolist() == list(t * grads * clients * k)
    assert m["cum_uplink_floats"].tolist() == list(t * up * clients * d)
    assert m["cum_downlink_floats"].tolist() == list(t * down * clients * d)
    assert m["cum_uplink_bytes"].tolist() == list(4 * t * up * clients * d)  # float32
    assert m["cum_downlink_bytes"].tolist() == list(4 * t * down * clients * d)


def test_epoch_mode_counts_each_clients_own_steps(tiny):
    cfg = tiny(algorithm="fedsam", local_steps=None, local_epochs=1, rounds=3, batch_size=32)
    res = fedlab.run(cfg, progress=False)
    sim = fedlab.Simulation.build(cfg)
    sizes = sim.partition.sizes
    want = [2 * sum(math.ceil(sizes[i] / 32) for i in sim.sample(t)) for t in range(3)]
    assert len(set(want)) > 1  # the clients' K_i differ from round to round
    assert res.metrics["grad_evals"].tolist() == want
    assert res.metrics["cum_grad_evals"].tolist() == list(np.cumsum(want))


def test_rounds_to_target_at_round_resolution_or_not_at_all():
    every = pd.DataFrame({"round": [1, 2, 3, 4, 5], "test_acc": [0.2, 0.5, 0.4, 0.7, 0.8]})
    assert rounds_to_target(every, 0.45, exact=True) == 2
    assert math.isnan(rounds_to_target(every, 0.9, exact=True))
    coarse = every.assign(test_acc=[np.nan, 0.5, np.nan, 0.7, np.nan])
    assert rounds_to_target(coarse, 0.6) == 4  # an upper bound read at the evaluated rounds
    with pytest.raises(ValueError, match="round 1 was not evaluated"):
        rounds_to_target(coarse, 0.45, exact=True)
    with pytest.raises(ValueError, match="round 3 was not evaluated"):
        rounds_to_target(every.assign(test_acc=[0.2, 0.3, np.nan, 0.7, 0.8]), 0.6, exact=True)


def test_the_cost_figure_draws_accuracy_against_cumulative_costs(tiny):
    from lab.tools.costs import cost_curves, cost_frame, plot_cost_accuracy

    runs = [fedlab.run(tiny(algorithm=a, rounds=4, seed=s), progress=False)
            for a in ("fedavg", "fedsam") for s in (0, 1)]
    curves = cost_curves(runs)
    avg, sam = (curves[curves["algorithm"] == a].set_index("round") for a in ("fedavg", "fedsam"))
    assert (sam["grad_evals"] == 2 * avg["grad_evals"]).all() and (avg["n"] == 2).all()
    assert (sam["comm_mb"] == avg["comm_mb"]).all()
    acc = np.mean([r.metrics["test_acc"].iloc[-1] for r in runs[:2]])
    assert avg["acc_pct"].iloc[-1] == pytest.approx(100 * acc)
    # a run recorded before the cost columns existed gives the same axes
    legacy = runs[2]
    old = type(legacy)(legacy.config, legacy.metrics.drop(columns=[c for c in legacy.metrics if c.startswith(("cum_",
                       "grad_evals"))]), legacy.theta, legacy.status, legacy.run_dir, legacy.summary)
    pd.testing.assert_frame_equal(cost_frame(old), cost_frame(legacy), check_dtype=False)
    fig = plot_cost_accuracy(runs, target_pct=20.0)
    assert [len(ax.get_lines()) for ax in fig.axes] == [3, 3, 3]  # 2 methods + target, on three axes
    assert fig.axes[0].get_ylabel() == "test accuracy (%)"
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_the_librarys_cost_panels_draw_the_cumulative_costs_of_the_metrics(tiny):
    """fedlab.analysis.plot_cost_accuracy: one panel per cost, communication, gradients, wall time (in that
    order), each line's x the run's cumulative cost at its evaluated rounds, read from its own metrics."""
    from fedlab.analysis import COST_AXES, plot_cost_accuracy

    run = fedlab.run(tiny(algorithm="scaffold", rounds=4, eval_every=2), progress=False)
    m = run.metrics
    evaluated = m["test_acc"].notna().to_numpy()
    expected = {"comm_mb": (m["cum_uplink_bytes"] + m["cum_downlink_bytes"]) / 1e6,
                "grad_evals": m["grad_evals"].cumsum(), "wall_s": m["wall_seconds"].cumsum()}
    fig = plot_cost_accuracy([run], label=str.upper)
    assert [ax.get_xlabel() for ax in fig.axes] == list(COST_AXES.values())
    assert "wall time" in fig.axes[2].get_xlabel()
    for ax, x in zip(fig.axes, COST_AXES):
        (line,) = ax.get_lines()
        np.testing.assert_allclose(line.get_xdata(), expected[x].to_numpy()[evaluated], rtol=1e-12, err_msg=x)
        np.testing.assert_allclose(line.get_ydata(), 100 * m["test_acc"].to_numpy()[evaluated], rtol=1e-12)
        assert line.get_label() == "SCAFFOLD (n=1)"
    import matplotlib.pyplot as plt

    plt.close(fig)
