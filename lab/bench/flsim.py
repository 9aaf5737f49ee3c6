"""Seconds per round in FL-Simulator's own CPU configuration, training and evaluation apart.

    python -m lab bench flsim                        # the full configuration (long on 2 cores)
    python -m lab bench flsim --train-size 10000 --test-size 2000 --rounds 3
    python -m lab bench flsim --quick                # seconds-long version (CI)
    python -m lab bench flsim --eval-diagnosis       # where evaluation time goes (batch, allocator)

The configuration is the one FL-Simulator runs on CPU: LeNet-5 on Fashion-MNIST padded to CIFAR's
3×32×32 (``as_cifar_shape=True``), 100 clients, Bernoulli participation with p = 0.1 (every client
takes part independently, so the number per round varies), 5 local epochs of B = 50
(``local_epochs=5, local_steps=None``), crop with probability 0.5 then flip with probability 0.5
(``crop_prob=0.5``), and every round an evaluation of the global model on the test set **and** on the
union of the clients' training data (the work FL-Simulator does each round). The other settings are
fedlab's defaults, which follow FL-Simulator (lr 0.1 decayed by 0.998 per round, weight decay 1e-3,
clipping at 10, Dirichlet α = 0.1).

For FedAvg and FedSAM it prints the median seconds per round (the first round is a warm-up and is
excluded) of training (sample, local epochs, upload, aggregation) and of each evaluation, and the
share of the FLOP floor that each part reaches: model FLOPs of the work done (forward + backward per
gradient for training — two per step for SAM —, forward for evaluation; counted by
``torch.utils.flop_counter``) divided by the FLOP rate of a plain float32 matmul on the same threads.

``--eval-diagnosis`` evaluates the union repeatedly for several evaluation batch sizes and records
wall time, user and system CPU time and page faults per evaluation,
so an allocator- or page-fault-bound evaluation shows up as system time and minor faults; with
``FEDLAB_MALLOC=default`` it runs under glibc's own dynamic thresholds instead of the fixed ones of
:mod:`fedlab.engine.malloc`.
"""
from __future__ import annotations

import argparse
import copy
import json
import resource
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lab.bench.curvature import load_average

FLSIM_CONFIG: dict[str, Any] = dict(
    dataset="fmnist", model="lenet5", as_cifar_shape=True, n_clients=100, sampling="bernoulli", participation=0.1,
    local_epochs=5, local_steps=None, batch_size=50, augment=True, crop_prob=0.5, eval_every=1,
)
"""FL-Simulator's CPU configuration as fedlab ``Config`` fields (the rest: fedlab's defaults)."""

ALGORITHMS = ("fedavg", "fedsam")


def forward_flops(model: Any, x: Tensor) -> int:
    """FLOPs of one forward pass of ``model`` (a FlatModel) on ``x`` (matmuls and convolutions)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.forward(model.theta0(), x)
    return int(counter.get_total_flops())


def _usage() -> tuple[float, float, int, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_majflt


def timed_evaluation(model: Any, theta: Tensor, x: Tensor, y: Tensor, batch_size: int | None) -> dict[str, float]:
    """One :func:`fedlab.engine.evaluate.evaluate` call: wall, user, system seconds and page faults."""
    from fedlab.engine.evaluate import evaluate

    u0, s0, f0, m0 = _usage()
    t0 = time.perf_counter()
    acc, loss = evaluate(model, theta, x, y, batch_size=batch_size)
    wall = time.perf_counter() - t0
    u1, s1, f1, m1 = _usage()
    return {"wall": wall, "user": u1 - u0, "sys": s1 - s0, "minor_faults": f1 - f0, "major_faults": m1 - m0,
            "acc": acc, "loss": loss}


def flsim_config(algorithm: str, *, train_size: int | None, test_size: int | None, rounds: int, runs_dir: str,
                 device: str = "cpu", **overrides: Any) -> Any:
    from fedlab.config import Config

    fields = dict(FLSIM_CONFIG, **overrides)
    return Config(algorithm=algorithm, train_size=train_size, test_size=test_size, rounds=rounds,
                  runs_dir=runs_dir, device=device, **fields)


def plain_round_seconds(plain: Any, sim: Any, t: int, theta: Tensor) -> tuple[float, float]:
    """Wall and CPU seconds of round t's local training by the plain-PyTorch loop, from ``theta``.

    The loop (:class:`~lab.bench.conventional.ConventionalFL`: an ``nn.Module``, ``torch.optim.SGD``,
    ``clip_grad_norm_``, two-pass SAM) steps through exactly the batches of fedlab's client jobs of
    round t, augmented by the same :class:`~fedlab.engine.clients.LocalData`, and averages the local
    models: the same work as fedlab's round, done the way research code usually does it.
    """
    from lab.bench.machine import sync
    from fedlab.engine.schedule import learning_rate

    c = sim.config
    plain.model.load_state_dict(sim.model.spec.unflatten(theta))
    lr = learning_rate(t, c.lr, c.lr_schedule, c.rounds, c.lr_decay)
    jobs = sim.client_jobs(t, sim.sample(t), sim.client_indices)
    data = sim.local_data
    sync(torch.device(c.device))
    c0, t0 = time.process_time(), time.perf_counter()
    states = [plain.train_on((data.batch(idx, job.aug_generator) for idx in job.batches), lr)[0] for job in jobs]
    plain.model.load_state_dict(plain.average(states))
    sync(torch.device(c.device))
    return time.perf_counter() - t0, time.process_time() - c0


EVAL_BATCH_CANDIDATES = (64, 128, 256, 512, 1024)
PROBE_IMAGES = 4096
"""Union images on which the evaluation batch is chosen and evaluation is compared with the plain forward."""


def choose_eval_batch(model: Any, theta: Tensor, x: Tensor, y: Tensor, candidates: Sequence[int] = EVAL_BATCH_CANDIDATES,
                      *, images: int = PROBE_IMAGES, repeats: int = 3) -> tuple[int, dict[int, float]]:
    """The evaluation batch size with the least wall time per image, by measurement.

    Each candidate evaluates the first ``images`` images ``repeats`` times after a warm-up; the
    candidates take turns, so a drift of the machine's speed hits all alike, and the median decides.
    Returns the choice and the median seconds per image of every candidate.
    """
    if not candidates or any(b < 1 for b in candidates):
        raise ValueError(f"eval batch candidates must be positive integers; got {list(candidates)}")
    xs, ys = x[:images], y[:images]
    for b in candidates:
        timed_evaluation(model, theta, xs[:2 * b], ys[:2 * b], b)
    seconds: dict[int, list[float]] = {b: [] for b in candidates}
    for _ in range(repeats):
        for b in candidates:
            seconds[b].append(timed_evaluation(model, theta, xs, ys, b)["wall"] / xs.shape[0])
    per_image = {b: statistics.median(v) for b, v in seconds.items()}
    return min(per_image, key=per_image.__getitem__), per_image


def plain_evaluation(module: torch.nn.Module, x: Tensor, y: Tensor, batch_size: int) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of an ``nn.Module`` called directly, batch by batch, under
    ``torch.inference_mode``: the plain-PyTorch yardstick for :func:`fedlab.engine.evaluate.evaluate`."""
    import torch.nn.functional as F

    correct, total = 0, 0.0
    with torch.inference_mode():
        for start in range(0, x.shape[0], batch_size):
            logits, target = module(x[start:start + batch_size]), y[start:start + batch_size]
            total += F.cross_entropy(logits, target, reduction="sum").item()
            correct += (logits.argmax(dim=1) == target).sum().item()
    return correct / x.shape[0], total / x.shape[0]


def eval_over_plain(model: Any, theta: Tensor, x: Tensor, y: Tensor, batch_size: int, *, repeats: int = 3) -> float:
    """Median over ``repeats`` of fedlab's evaluation time over the plain module's on the same images
    and batch size, the two taking turns (the module holds θ)."""
    from fedlab.engine.evaluate import evaluate

    module = copy.deepcopy(model.module)
    module.load_state_dict(model.spec.unflatten(theta))
    module.eval()
    plain_evaluation(module, x[:2 * batch_size], y[:2 * batch_size], batch_size)  # warm-up
    ratios = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        evaluate(model, theta, x, y, batch_size=batch_size)
        t1 = time.perf_counter()
        plain_evaluation(module, x, y, batch_size)
        ratios.append((t1 - t0) / (time.perf_counter() - t1))
    return statistics.median(ratios)


def bench_algorithm(algorithm: str, *, train_size: int | None, test_size: int | None, rounds: int,
                    eval_batch: int | str | None, device: str, matmul_rate: float, reference: bool = True,
                    **overrides: Any) -> dict[str, Any]:
    """Rounds 0 … rounds−1 of ``algorithm`` in the FL-Simulator configuration, each part timed.

    With ``reference`` every round's local training is also done by a plain-PyTorch loop on the
    same batches (:func:`plain_round_seconds`); ``train_over_plain`` is fedlab's training time over
    it, the median over the timed rounds of the per-round ratio. ``eval_batch="auto"`` picks the
    evaluation batch by :func:`choose_eval_batch` on the union at the initial model.
    """
    from fedlab.algorithms import algorithm_class
    from lab.bench.conventional import ConventionalFL
    from lab.bench.machine import sync
    from lab.bench.workload import model_flops
    from fedlab.engine import Simulation

    dev = torch.device(device)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = flsim_config(algorithm, train_size=train_size, test_size=test_size, rounds=rounds, runs_dir=tmp,
                           device=device, **overrides)
        sim = Simulation.build(cfg)
        state = sim.initial_state()
        x_test, y_test = sim.dataset.x_test, sim.dataset.y_test
        union = torch.cat(sim.client_indices).to(sim.dataset.x_train.device)
        x_union, y_union = sim.dataset.x_train[union], sim.dataset.y_train[union]
        shape = tuple(sim.dataset.input_shape)
        step_flops = model_flops(cfg.model, shape, cfg.batch_size, sim.dataset.n_classes, dev) / cfg.batch_size
        fwd_per_image = forward_flops(sim.model, x_test[:64]) / 64
        grads = algorithm_class(algorithm).grad_evals_per_step
        theta0 = sim.algorithm.global_model(state.server)
        per_image = None
        if eval_batch == "auto":
            eval_batch, per_image = choose_eval_batch(sim.model, theta0, x_union, y_union, images=PROBE_IMAGES)
            print(f"  {algorithm} evaluation batch by measurement: {eval_batch} ("
                  + ", ".join(f"{b}: {1e6 * v:.0f}" for b, v in per_image.items()) + " µs per image)", flush=True)
        plain, eval_ratio = None, None
        if reference:
            from fedlab.engine.evaluate import eval_batch_size

            plain = ConventionalFL.from_simulation(sim)
            eval_ratio = eval_over_plain(sim.model, theta0, x_union[:PROBE_IMAGES], y_union[:PROBE_IMAGES],
                                         eval_batch or eval_batch_size(dev))
        rows = []
        for t in range(rounds):
            theta_before = sim.algorithm.global_model(state.server).detach().clone()
            # fedlab and the plain loop take turns going first, so a drift of the machine's speed
            # within a round pair does not always favour the same one
            plain_s = plain_cpu = None
            if plain is not None and t % 2 == 1:
                plain_s, plain_cpu = plain_round_seconds(plain, sim, t, theta_before)
            sync(dev)
            c0, t0 = time.process_time(), time.perf_counter()
            outcome = sim.train_round(state, t)
            sync(dev)
            train_s, train_cpu = time.perf_counter() - t0, time.process_time() - c0
            if plain is not None and t % 2 == 0:
                plain_s, plain_cpu = plain_round_seconds(plain, sim, t, theta_before)
            # samples processed by the local gradients (the last batch of an epoch may be smaller)
            samples = sum(int(sum(b.numel() for b in job.batches)) for job in
                          sim.client_jobs(t, outcome.clients, sim.client_indices))
            theta = sim.algorithm.global_model(state.server)
            test = timed_evaluation(sim.model, theta, x_test, y_test, eval_batch)
            uni = timed_evaluation(sim.model, theta, x_union, y_union, eval_batch)
            rows.append({"round": t, "clients": len(outcome.clients), "train_samples": samples,
                         "train_s": train_s, "train_cpu_s": train_cpu, "plain_train_s": plain_s,
                         "plain_train_cpu_s": plain_cpu, "test_eval_s": test["wall"],
                         "test_eval_cpu_s": test["user"] + test["sys"], "union_eval_s": uni["wall"],
                         "union_eval_cpu_s": uni["user"] + uni["sys"],
                         "union_eval_sys_s": uni["sys"], "union_eval_minor_faults": uni["minor_faults"],
                         "test_acc": test["acc"], "union_acc": uni["acc"]})
            plain_text = "" if plain_s is None else f", plain PyTorch {plain_s:.2f} s"
            print(f"  {algorithm} round {t}: {len(outcome.clients)} clients, train {train_s:.2f} s (cpu {train_cpu:.2f})"
                  f"{plain_text}, test eval {test['wall']:.2f} s, union eval {uni['wall']:.2f} s "
                  f"(sys {uni['sys']:.2f} s, {uni['minor_faults']} minor faults)", flush=True)
    timed = rows[1:] if len(rows) > 1 else rows
    keys = ["train_s", "test_eval_s", "union_eval_s", "train_cpu_s", "test_eval_cpu_s", "union_eval_cpu_s"]
    keys += ["plain_train_s", "plain_train_cpu_s"] if reference else []
    med = {k: statistics.median(r[k] for r in timed) for k in keys}
    # per round pair, so the ratio survives a drift of the machine's speed between rounds
    ratio = statistics.median(r["train_s"] / r["plain_train_s"] for r in timed) if reference else None
    train_floor = statistics.median(r["train_samples"] * grads * step_flops / r["train_s"] for r in timed) / matmul_rate
    eval_floor = fwd_per_image * (x_test.shape[0] + x_union.shape[0]) / (med["test_eval_s"] + med["union_eval_s"])
    return {"algorithm": algorithm, "rounds": rows, "median": med, "train_over_plain": ratio,
            "eval_over_plain": eval_ratio,
            "eval_batch": eval_batch, "eval_batch_seconds_per_image": per_image,
            "round_s": med["train_s"] + med["test_eval_s"] + med["union_eval_s"],
            "train_share_of_floor": train_floor, "eval_share_of_floor": eval_floor / matmul_rate,
            "clients_per_round": statistics.median(r["clients"] for r in timed),
            "n_test": int(x_test.shape[0]), "n_union": int(x_union.shape[0])}


def eval_diagnosis(*, train_size: int | None, batch_sizes: Sequence[int], repeats: int, device: str) -> dict[str, Any]:
    """Evaluation of the union for each batch size, in this process's allocator regime.

    ``Simulation.build`` fixes glibc's thresholds (:func:`fedlab.engine.malloc.stable_malloc`) unless
    ``FEDLAB_MALLOC=default`` is set: run the diagnosis once each way to compare.
    """
    from fedlab.engine import Simulation
    from fedlab.engine.malloc import stable_malloc

    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulation.build(flsim_config("fedavg", train_size=train_size, test_size=100, rounds=1, runs_dir=tmp,
                                            device=device))
    union = torch.cat(sim.client_indices)
    x, y = sim.dataset.x_train[union], sim.dataset.y_train[union]
    theta = sim.model.theta0()
    out: dict[str, Any] = {"n_union": int(x.shape[0]), "threads": torch.get_num_threads(), "phases": {}}
    for phase in ["fixed thresholds" if stable_malloc() else "glibc default"]:
        res = {}
        for b in batch_sizes:
            timed_evaluation(sim.model, theta, x[:2 * b], y[:2 * b], b)  # warm-up of this shape
            runs = [timed_evaluation(sim.model, theta, x, y, b) for _ in range(repeats)]
            res[b] = {k: [r[k] for r in runs] for k in ("wall", "user", "sys", "minor_faults")}
        out["phases"][phase] = res
    return out


def print_bench(res: dict[str, Any]) -> None:
    s = res["settings"]
    print(f"FL-Simulator configuration: LeNet-5, Fashion-MNIST as 3x32x32 ({s['train_size'] or 'all'} train, "
          f"{s['test_size'] or 'all'} test), 100 clients, Bernoulli 10 %, 5 epochs of B = 50, crop p 0.5; "
          f"{s['rounds']} rounds (first excluded), {s['threads']} thread(s); matmul {s['matmul_gflops']:.0f} GFLOP/s; "
          f"load {res['load_average']}")
    head = f"{'algorithm':<9} {'clients':>7} {'train s':>8} {'plain s':>8} {'/plain':>6} {'eval batch':>10} " \
           f"{'test eval s':>11} {'union eval s':>12} {'/plain':>6} {'round s':>8} {'train/floor':>11} {'eval/floor':>10}"
    print(head)
    print("-" * len(head))
    for r in res["algorithms"]:
        m = r["median"]
        plain = f"{m['plain_train_s']:>8.2f} {r['train_over_plain']:>6.2f}" if r.get("train_over_plain") else \
            f"{'-':>8} {'-':>6}"
        print(f"{r['algorithm']:<9} {r['clients_per_round']:>7.0f} {m['train_s']:>8.2f} {plain} "
              f"{str(r['eval_batch'] or 'default'):>10} {m['test_eval_s']:>11.2f} {m['union_eval_s']:>12.2f} "
              f"{r['eval_over_plain'] if r.get('eval_over_plain') else float('nan'):>6.2f} "
              f"{r['round_s']:>8.2f} {100 * r['train_share_of_floor']:>10.0f}% {100 * r['eval_share_of_floor']:>9.0f}%")
    by = {r["algorithm"]: r for r in res["algorithms"]}
    if "fedavg" in by and "fedsam" in by:
        print(f"FedSAM/FedAvg training: {by['fedsam']['median']['train_s'] / by['fedavg']['median']['train_s']:.2f}")
    print(f"evaluated images per round: {res['algorithms'][0]['n_test']} test + {res['algorithms'][0]['n_union']} union; "
          "'plain s': the same batches through nn.Module + torch.optim.SGD (two-pass SAM); '/plain': fedlab over "
          f"the plain loop (training) and over the module's own forward on {PROBE_IMAGES} union images (evaluation)")


def print_diagnosis(d: dict[str, Any]) -> None:
    print(f"evaluation of the {d['n_union']}-image union, {d['threads']} thread(s): median over repeats "
          "(wall / user / sys seconds, minor page faults)")
    for phase, res in d["phases"].items():
        for b, r in res.items():
            med = {k: statistics.median(v) for k, v in r.items()}
            print(f"  {phase:<14} batch {b:>5}: wall {med['wall']:.3f} (min {min(r['wall']):.3f}, max "
                  f"{max(r['wall']):.3f})  user {med['user']:.3f}  sys {med['sys']:.3f}  faults {med['minor_faults']:.0f}")


def _eval_batch(text: str) -> int | str | None:
    if text in ("auto", "default"):
        return None if text == "default" else text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--eval-batch takes a positive integer, 'auto' or 'default'; got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    from lab.bench.workload import matmul_flops_per_second

    p = argparse.ArgumentParser(prog="python -m lab bench flsim", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS))
    p.add_argument("--train-size", type=int, default=None, help="class-balanced training subset (default: all)")
    p.add_argument("--test-size", type=int, default=None, help="class-balanced test subset (default: all)")
    p.add_argument("--rounds", type=int, default=4, help="rounds per algorithm; the first is excluded")
    p.add_argument("--eval-batch", type=_eval_batch, default="auto",
                   help="evaluation batch: a size, 'auto' (chosen by measurement) or 'default' (fedlab's)")
    p.add_argument("--no-reference", action="store_true", help="skip the plain-PyTorch loop on the same batches")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--eval-diagnosis", action="store_true", help="only the evaluation-time diagnosis")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 128, 256, 512, 1000])
    p.add_argument("--repeats", type=int, default=5, help="evaluations per batch size in the diagnosis")
    p.add_argument("--quick", action="store_true", help="seconds-long version: 300 train, 100 test, 2 rounds")
    p.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.rounds < 1 or args.threads < 1 or args.repeats < 1:
        p.error("--rounds, --threads and --repeats must be >= 1")
    if args.quick:
        args.train_size, args.test_size, args.rounds, args.batch_sizes, args.repeats = 300, 100, 2, [64, 256], 1
    torch.set_num_threads(args.threads)
    if args.eval_diagnosis:
        res: dict[str, Any] = eval_diagnosis(train_size=args.train_size, batch_sizes=args.batch_sizes,
                                             repeats=args.repeats, device=args.device)
        res["load_average"] = load_average()
        print_diagnosis(res)
    else:
        rate = matmul_flops_per_second(args.device, n=512 if args.quick else None)
        rows = [bench_algorithm(a, train_size=args.train_size, test_size=args.test_size, rounds=args.rounds,
                                eval_batch=args.eval_batch, device=args.device, matmul_rate=rate,
                                reference=not args.no_reference)
                for a in args.algorithms]
        res = {"settings": {"train_size": args.train_size, "test_size": args.test_size, "rounds": args.rounds,
                            "eval_batch": args.eval_batch, "threads": args.threads, "device": args.device,
                            "matmul_gflops": rate / 1e9, **{k: v for k, v in FLSIM_CONFIG.items()}},
               "load_average": load_average(), "algorithms": rows}
        print_bench(res)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
