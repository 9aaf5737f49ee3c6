"""The library's house, drawn from its own imports: ``fedlab`` never imports the lab (or anything that
is neither fedlab, the standard library nor a declared dependency), no layer imports a higher one, and
no two modules import each other, directly or round a longer circle.

The layers are declared once, here, lowest first; a module belongs to the layer of its longest
prefix (``fedlab.engine.loop`` → ``fedlab.engine``). Modules of one layer may import each other (a
circle among them still fails); an import of a higher layer is the house standing upside down.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fedlab"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("fedlab._version", "fedlab._rng", "fedlab._paths", "fedlab.store"),  # the ground floor: no fedlab imports
    ("fedlab.models", "fedlab.data"),
    ("fedlab.algorithms",),
    ("fedlab.config",),
    ("fedlab.results", "fedlab.tracking"),
    ("fedlab.engine",),
    ("fedlab.analysis", "fedlab.evidence"),
    ("fedlab.sweep",),
    ("fedlab.flower", "fedlab"),  # ``fedlab`` itself: the public API re-exported by fedlab/__init__.py
    ("fedlab.cli",),
    ("fedlab.__main__",),
)
# What the library may import besides itself and the standard library: pyproject's dependencies and
# extras, by import name (the Flower and Ray extras are imported only where they are used).
THIRD_PARTY = frozenset({"torch", "torchvision", "numpy", "pandas", "sklearn", "matplotlib", "tqdm", "yaml",
                         "filelock", "scipy", "flwr", "ray", "wandb", "mlflow"})


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, lazy ones included."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against this module's package
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from fedlab import sweep` imports the module fedlab.sweep
            found += [(node.lineno, f"{target}.{a.name}") for a in node.names
                      if (PACKAGE.parent / f"{target}.{a.name}".replace(".", "/")).exists()
                      or (PACKAGE.parent / (f"{target}.{a.name}".replace(".", "/") + ".py")).exists()]
    return found


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {m: sorted({t for _, t in _imports(p) if t in MODULES and t != m}) for m, p in MODULES.items()}


def layer(module: str) -> int:
    """The index in :data:`LAYERS` of the longest declared prefix of ``module``."""
    best = None
    for index, names in enumerate(LAYERS):
        for prefix in names:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (index, prefix)
    assert best is not None, f"{module} is in no layer of tests/test_layering.py: declare it"
    return best[0]


def test_every_module_has_a_layer():
    for module in MODULES:
        layer(module)


def _outside(imports: list[tuple[int, str]]) -> list[str]:
    allowed = {"fedlab", "__future__"} | THIRD_PARTY | set(sys.stdlib_module_names)
    return [f"line {line}: {target}" for line, target in imports if target.split(".")[0] not in allowed]


def _upward(module: str, imports: list[tuple[int, str]]) -> list[str]:
    return [f"line {line}: {target} (layer {layer(target)})" for line, target in imports
            if target.split(".")[0] == "fedlab" and layer(target) > layer(module)]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_the_library_imports_only_itself_the_standard_library_and_its_dependencies(module):
    outside = _outside(_imports(MODULES[module]))
    assert not outside, f"{module} imports what a library user does not have (the lab?): {outside}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_layer_imports_a_higher_one(module):
    up = _upward(module, _imports(MODULES[module]))
    assert not up, f"{module} (layer {layer(module)}) imports upward: {up}"


def test_no_circles():
    """Depth-first search over the module graph; a back edge is a circle, reported with its members."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []
    circles = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for t in GRAPH[m]:
            if state.get(t) == 1:
                circles.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t)
        path.pop()
        state[m] = 2

    for m in GRAPH:
        if m not in state:
            visit(m)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_checks_see_what_they_forbid():
    """The checks themselves, on the arrows this test was written against: the engine reading the lab's
    records and a data module raising the config's error."""
    assert _outside([(1, "lab.evidence.records")]) == ["line 1: lab.evidence.records"]
    assert _upward("fedlab.data.holdout", [(1, "fedlab.config")])
    assert not _upward("fedlab.engine.loop", [(1, "fedlab.config"), (2, "fedlab.engine.batches")])


# A ratchet, not the goal: issue 25 asks for at most 11,000 lines; the library stood at 12,102 when this
# guard was added (21 methods, the successors included); 12,171 after Lanczos with per-value convergence
# flags (issue 41), two hardening checks and the data folder outside site-packages (issue 46); 12,627 with
# FedLESAM-S/-D, the privacy accountant, DP-FedAvg and DP-FedSAM (issue 45: four methods, +456); 12,635
# with three more declared limits (issue 46); 12,752 with FedScar (issue 45: its module, 115 lines, and its
# tuning grid, 2); 12,754 with FedWMSAM's sign consequence in its docstring; 12,851 with
# fedlab.analysis.curvature (issue 41: one class-balanced curvature sample and λ_max with its convergence flag,
# shared by notebooks 02 and 09, 95 lines, +2 for its re-exports); 12,862 with messages that name what is
# allowed (issue 46 item 4: a bool among the seeds, --parallel-clients abc, a sweep log naming its run key);
# 12,950 with fedlab.analysis.costs (issue 46 item 4: the accuracy-against-cost panels moved from the lab,
# which kept a 21-line house-style wrapper of its 81, plus the wall-time panel); 13,057 with trackers that
# name runs by what they are (fedlab.tracking.run_name) and W&B and MLflow built in as optional extras
# (issue 46 item 4: the guide's paste-in adapter became WandbLogger and MLflowLogger, +107); 13,106 with
# flower-sim storing its run as `run` does (issue 46 item 4: the engine's rows, store and tracker from the
# Flower server, +65; flower-sim's flags and defaults derived from Config instead of restated, -16); 13,311
# with fedlab.flower.launch and `flower-run` (issue 46 item 4: `flwr run . local` exits 0 on a failed run and
# leaves a SuperLink running; the launcher owns its SuperLink, waits for the run's status and stops every
# process under it, +205); 13,358 with each method's label, colour, place and tuning grid on its own class
# (issue 44: +89 in the method modules, base.py, sam.py and the registry, −52 for the tuning table they
# replace) and Config.built_algorithm, the one instance a run trains with and its key reads (issue 44: built
# once per run, +10); 13,381 with per-client vectors (issue 46: client_acc/<i> beside their summaries) and a
# CIFAR reader that unpickles arrays only (issue 46: torchvision's pickle.load ran what an unverified file
# named). Lower the number as the library shrinks; raising it needs a reason in the commit that does.
MAX_LIBRARY_LINES = 13_381
MAX_MODULE_LINES = 450
SIZES = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items()}


def test_no_module_is_longer_than_450_lines():
    """A module a reader takes in whole (issue 25): past 450 lines it holds more than one idea."""
    long = {m: n for m, n in SIZES.items() if n > MAX_MODULE_LINES}
    assert not long, f"modules above {MAX_MODULE_LINES} lines: {long}"


def test_the_library_does_not_grow_past_its_ratchet():
    """The library a stranger installs stays small (issue 25 asks 11,000 lines); the harness lives in lab/."""
    total = sum(SIZES.values())
    by_package: dict[str, int] = {}
    for m, n in SIZES.items():
        key = ".".join(m.split(".")[:2])
        by_package[key] = by_package.get(key, 0) + n
    assert total <= MAX_LIBRARY_LINES, \
        f"fedlab/ has {total:,} lines, above {MAX_LIBRARY_LINES:,}: {dict(sorted(by_package.items(), key=lambda kv: -kv[1]))}"
