"""One final metric (issue 41): the mean test accuracy over the last 20 % of the rounds, computed in one place.

:func:`lab.evidence.protocol.final_metric` is checked on synthetic metrics (the exact mean of rounds 81–100 of a
100-round run; the labelled fallback of a record without them), and every module of ``lab/`` is read for a
function that computes a final accuracy of its own (the last round's ``test_acc``, a tail mean, the run's
``final_accuracy``): only the allow-list below may, each entry with its reason.
"""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pandas as pd
import pytest

import fedlab
from fedlab.results import RunResult
from lab.evidence.protocol import Curve, final_metric, final_rounds

LAB = Path(__file__).resolve().parents[1] / "lab"

_SEED_MEANS = ("means over seeds of the committed figure's per-seed final accuracies, which its notebook wrote "
               "through final_metric (the CSV's final_acc / test_acc column): a paragraph's average, not a run's own "
               "final accuracy")
ALLOWED: dict[tuple[str, str], str] = {
    ("evidence/protocol.py", "Curve.of"): "reads a run's accuracies by round and its last evaluation (the fallback)",
    ("evidence/protocol.py", "final_metric"): "the one definition",
    ("regime/pilot_records.py", "final_metric"): "the regime pilot's own score, pre-registered in "
                                                 "lab/regime/criteria.yaml (mean of its last 3 evaluations) before its "
                                                 "runs; it chose the regime and is not the evidence's final metric",
    ("evidence/record_load.py", "check_run"): "checks a record's summary (its last and best accuracy) against its "
                                              "own metrics on load; it reports no accuracy",
    ("regime/rerun_plan.py", "evaluation_seconds"): "times the evaluated rounds (wall seconds), reads no accuracy",
    ("lessons/benchmarks.py", "bars.against_fedavg"): _SEED_MEANS,
    ("lessons/fednsam.py", "accuracy_flatness"): _SEED_MEANS,
    ("lessons/fedvssam.py", "gamma_sweep"): _SEED_MEANS,
    ("lessons/sharpness.py", "flatness_accuracy"): _SEED_MEANS,
}
"""(module under lab/, function) → why it may touch a run's last accuracies itself."""

_ACCURACY_COLUMNS = ("test_acc", "final_acc")
_REDUCERS = {"tail", "mean", "last", "nlargest", "median"}


def _own_nodes(fn: ast.AST):
    """The nodes of ``fn``'s body, nested functions and classes excluded (they are judged on their own)."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _negative_index(node: ast.Subscript) -> bool:
    index = node.slice
    bounds = [index.lower, index.upper] if isinstance(index, ast.Slice) else [index]
    return any(isinstance(b, ast.UnaryOp) and isinstance(b.op, ast.USub) for b in bounds if b is not None)


def _names_accuracy(expr: ast.AST, tainted: set[str]) -> bool:
    """Whether ``expr`` names an accuracy column, or a variable that holds one."""
    return any((isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(_ACCURACY_COLUMNS))
               or (isinstance(n, ast.Name) and n.id in tainted) for n in ast.walk(expr))


def _tainted(nodes: list[ast.AST]) -> set[str]:
    """The variables of a function that hold accuracies: assigned (or iterated) from an expression that names an
    accuracy column or such a variable, to a fixed point."""
    pairs = []
    for n in nodes:
        if isinstance(n, ast.Assign):
            pairs += [(t, n.value) for t in n.targets]
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            pairs.append((n.target, n.value))
        elif isinstance(n, (ast.For, ast.comprehension)):
            pairs.append((n.target, n.iter))
    tainted: set[str] = set()
    while True:
        more = {t.id for target, value in pairs if _names_accuracy(value, tainted)
                for t in ast.walk(target) if isinstance(t, ast.Name)} - tainted
        if not more:
            return tainted
        tainted |= more


def own_final_accuracy(fn: ast.AST) -> list[str]:
    """Why ``fn`` computes a final accuracy of its own (empty: it does not). A function does when it reads a
    run's ``final_accuracy``, indexes ``FINAL_METRIC``'s window itself, or takes the tail of an accuracy: a
    negative index (``iloc[-1]``, ``[-k:]``) or a reducer (``.tail``, ``.mean``, …) applied to an expression
    that names an accuracy column (``test_acc``, ``test_acc_pct``, ``final_acc``) or a variable holding one."""
    nodes = list(_own_nodes(fn))
    tainted = _tainted(nodes + [c for n in nodes for c in ast.walk(n) if isinstance(c, ast.comprehension)])
    why = [f"line {n.lineno}: .final_accuracy" for n in nodes
           if isinstance(n, ast.Attribute) and n.attr == "final_accuracy"]
    why += [f"line {n.lineno}: FINAL_METRIC[{ast.unparse(n.slice)}]" for n in nodes
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "FINAL_METRIC"
            and isinstance(n.slice, ast.Constant) and n.slice.value in ("last_fraction", "k")]
    for n in nodes:
        if isinstance(n, ast.Subscript) and _negative_index(n) and _names_accuracy(n.value, tainted):
            why.append(f"line {n.lineno}: {ast.unparse(n)}")
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _REDUCERS \
                and any(_names_accuracy(x, tainted) for x in [n.func.value, *n.args]):
            why.append(f"line {n.lineno}: {ast.unparse(n)}")
    return sorted(set(why))


def _functions(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def test_no_module_of_the_lab_computes_its_own_final_accuracy():
    found, seen = [], set()
    for path in sorted(LAB.rglob("*.py")):
        module = path.relative_to(LAB).as_posix()
        for name, fn in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            why = own_final_accuracy(fn)
            if (module, name) in ALLOWED:
                seen.add((module, name))
            elif why:
                found.append(f"lab/{module}: {name} ({'; '.join(why)})")
    assert not found, ("read a run's final accuracy through lab.evidence.protocol.final_metric, or add the function "
                       "to ALLOWED with its reason: " + " | ".join(found))
    assert seen == set(ALLOWED), f"allow-list entries that no longer exist: {sorted(set(ALLOWED) - seen)}"


def test_the_check_sees_what_it_forbids():
    def check(source: str) -> list[str]:
        return own_final_accuracy(ast.parse(source).body[0])

    assert check("def f(res):\n    return res.final_accuracy")
    assert check("def f(m):\n    acc = m['test_acc'].dropna()\n    return acc.iloc[-1]")
    assert check("def f(t):\n    return t[t['round'] > 95]['test_acc_pct'].mean()")
    assert check("def f(m):\n    return m['test_acc'].to_numpy()[-5:]")
    assert check("def f():\n    return FINAL_METRIC['last_fraction']")
    assert check("def f(curves):\n    c = {k: r['test_acc'].tolist() for k, r in curves}\n    return [v[-1] for v in c.values()]")
    assert not check("def f(m):\n    return m['wall_seconds'].mean()")  # no accuracy named: not a final accuracy
    assert not check("def f(m, metric='test_acc'):\n    return m[metric].rolling(3).mean()")  # a smoothed curve
    assert not check("def f(res):\n    return final_metric(res).value")
    assert not check("def f():\n    return FINAL_METRIC['eval_every']")  # the evaluation grid of a config


# --- the function on synthetic metrics ----------------------------------------------------------------------
def _run(rounds: int, accs: dict[int, float], **config) -> RunResult:
    cfg = fedlab.Config(dataset="digits", rounds=rounds, **({"eval_every": 1, "eval_subsample": None} | config))
    metrics = pd.DataFrame({"round": list(accs), "test_acc": list(accs.values())})
    return RunResult(cfg, metrics, None, "finished", None, {})


def test_the_final_metric_of_100_rounds_is_the_exact_mean_of_rounds_81_to_100():
    accs = {r: r / 1000 for r in range(1, 101)}  # round r scores r / 1000
    got = final_metric(_run(100, accs))
    assert final_rounds(100) == tuple(range(81, 101))
    assert got.protocol and got.value == pytest.approx(sum(r / 1000 for r in range(81, 101)) / 20, abs=1e-15)
    assert got.value == pytest.approx(0.0905, abs=1e-15)  # (81 + 100) / 2 / 1000
    assert got.how == "mean of the last 20 % of rounds (rounds 81–100 of 100), full test set"
    # a curve built from a table reads the same rule (a committed figure's per-seed panel)
    assert final_metric(Curve(accs, 100)).value == got.value
    assert final_rounds(50) == tuple(range(41, 51)) and final_rounds(4) == (4,) and final_rounds(7) == (6, 7)


def test_a_record_without_the_final_window_falls_back_to_its_last_evaluation_labelled():
    every_fifth = {r: r / 1000 for r in range(5, 101, 5)}  # a pre-protocol record: one evaluation per 5 rounds
    got = final_metric(_run(100, every_fifth))
    assert not got.protocol and got.value == 0.1
    assert got.how == "last evaluation (not evaluated at every one of rounds 81–100, so not the protocol's mean)"
    gap = {r: r / 1000 for r in range(1, 101) if r != 90}  # one round of the window missing
    assert not final_metric(_run(100, gap)).protocol
    nan = {r: (math.nan if r == 95 else r / 1000) for r in range(1, 101)}
    assert not final_metric(_run(100, nan)).protocol
    sub = final_metric(_run(100, {r: r / 1000 for r in range(1, 101)}, test_size=1000, eval_subsample=500))
    assert not sub.protocol
    assert sub.how == "last evaluation on a 500-image test subsample (not on the full test set, so not the protocol's mean)"
    with pytest.raises(ValueError, match="last_fraction"):
        final_rounds(100, {"last_fraction": 0.0, "eval_every": 1})


# --- the notebooks ------------------------------------------------------------------------------------------
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def notebook_reads_its_own(source: str) -> list[str]:
    """Where a notebook's code (top level and every function) takes a final accuracy itself: a run's
    ``final_accuracy``, ``FINAL_METRIC``'s window, or the tail of an expression that names an accuracy column.
    Unlike the lab's check, variables are not followed (a notebook's top level reuses names across sections,
    so following them would flag every mean of every table): only the direct forms count."""
    tree = ast.parse(source)
    scopes = [ast.Module(body=tree.body, type_ignores=[])] + [fn for _, fn in _functions(tree)]
    found: set[str] = set()
    for scope in scopes:
        nodes = list(_own_nodes(scope))
        found.update(f"line {n.lineno}: .final_accuracy" for n in nodes
                     if isinstance(n, ast.Attribute) and n.attr == "final_accuracy")
        for n in nodes:
            if isinstance(n, ast.Subscript) and _negative_index(n) and _names_accuracy(n.value, set()):
                found.add(f"line {n.lineno}: {ast.unparse(n)}")
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _REDUCERS \
                    and any(_names_accuracy(x, set()) and _over_rounds(x) for x in [n.func.value, *n.args]):
                found.add(f"line {n.lineno}: {ast.unparse(n)}")
    return sorted(found)


def _over_rounds(expr: ast.AST) -> bool:
    """Whether an accuracy expression is taken over a window of rounds (it names the ``round`` column, or is a
    ``tail``): a mean over seeds or methods of a per-run accuracy is not a final metric of its own."""
    return any((isinstance(n, ast.Constant) and n.value == "round")
               or (isinstance(n, ast.Attribute) and n.attr == "tail") for n in ast.walk(expr))


def test_no_notebook_computes_its_own_final_accuracy():
    found = {p.name: why for p in sorted(NOTEBOOKS.glob("*.py"))
             if (why := notebook_reads_its_own(p.read_text(encoding="utf-8")))}
    assert not found, f"read a run's final accuracy through lab.evidence.protocol.final_metric: {found}"


def test_the_notebook_check_sees_what_it_forbids():
    assert notebook_reads_its_own("acc = [r.final_accuracy for r in runs]")
    assert notebook_reads_its_own("def f(one):\n    return one['test_acc'].iloc[-1]")
    assert notebook_reads_its_own("x = t.loc[t['round'] > 80, 'test_acc'].mean()")
    assert not notebook_reads_its_own("acc = [final_metric(r).value for r in runs]")
    assert not notebook_reads_its_own("m = table['lambda_max'].mean()")
    assert not notebook_reads_its_own("by_method = points.groupby('method')['test_acc'].mean()")  # over seeds
    assert notebook_reads_its_own("x = curve['test_acc'].tail(20).mean()")
