"""``python -m lab bench step``: its quick mode reports a positive timing for both loops of every row, and the
plain loop it times against does fedlab's math (it ends where fedlab's local steps end). No timing is asserted
beyond being positive: speed is shown by the benchmark's printed numbers (BENCHMARKS.md)."""
from __future__ import annotations

import json

import pytest

from lab.bench.step import AGREEMENT, ALGORITHMS, QUICK, OneClient


def test_bench_step_quick_reports_every_row(tmp_path, capsys):
    from lab.cli import main

    out = tmp_path / "step.json"
    assert main(["bench", "step", "--quick", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["quick"] and res["threads"] == 1 and set(res["load_average"]) == {"before", "after"}
    assert [(r["model"], r["algorithm"]) for r in res["rows"]] == [(m, a) for m in QUICK for a in ALGORITHMS]
    for r in res["rows"]:
        s = QUICK[r["model"]]
        assert (r["local_steps"], r["batch_size"], r["pairs"]) == (s.local_steps, s.batch_size, s.pairs)
        for key in ("fedlab_ms", "plain_ms", "fedlab_cpu_ms", "plain_cpu_ms", "ratio", "cpu_ratio"):
            assert r[key] > 0, (r["model"], r["algorithm"], key)
        assert r["param_gap"] <= AGREEMENT, r
    printed = capsys.readouterr().out
    assert "fedlab ms" in printed and "plain ms" in printed and "cpu ratio" in printed and "load average" in printed
    assert sum(line.startswith(("mlp ", "cnn ")) for line in printed.splitlines()) == len(res["rows"])


@pytest.mark.parametrize("model", sorted(QUICK))
def test_the_plain_loop_ends_where_fedlabs_local_steps_end(tmp_path, model):
    """FedSAM, K = 3 steps of B = 8 from the same θ₀: the plain loop (an ``nn.Module``, ``torch.optim.SGD`` with
    weight decay, ``clip_grad_norm_``, two-pass SAM) lands within ``AGREEMENT`` (1 %) of the client's update of
    fedlab's θ_K (measured ~1e-6: float32 rounding in other kernels). The bound tells the math apart: the same
    plain loop without its SAM pass lands a quarter of the update away or more."""
    client = OneClient("fedsam", QUICK[model], str(tmp_path))
    ours = client.fedlab()
    moved = (ours - client.theta0).norm()
    assert moved > 0
    assert (client.plain() - ours).norm() <= AGREEMENT * moved
    client.baseline.algorithm = "fedavg"
    assert (client.plain() - ours).norm() > 10 * AGREEMENT * moved
