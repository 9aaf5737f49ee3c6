"""Each notebook's closing section, "How this evidence was made", written from its parameters.

A notebook runs at three sizes, set by parameters and never by editing its code: ``ci``, the defaults of its
``parameters`` cell; ``cpu`` and ``paper``, the files ``notebooks/params/<notebook>.<size>.yaml`` that papermill
lays over those defaults. What each size trains is a fact of those files, so it is written from them, not by
hand: the section sits between two marker lines in the notebook's last markdown cell, and

    python -m lab.tools.how_made --write     # rewrite the sections (and pair the .ipynb, outputs kept)
    python -m lab.tools.how_made --check     # exit 1 naming each notebook whose section is stale

``tests/test_how_made.py`` fails when a parameter file changed and its notebook's section did not. The
vocabulary (profiles, records, sidecars) is explained once, on the book's running page.
"""
from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import Any

import yaml

from lab.repro import REPO_ROOT

__all__ = ["BEGIN", "END", "SIZES", "federation_words", "how_made_lines", "parameter_defaults", "section_of",
           "size_parameters", "write"]

NB_DIR = REPO_ROOT / "notebooks"
BEGIN = "<!-- how-made: written by `python -m lab.tools.how_made --write` from the parameters; edit those -->"
END = "<!-- how-made: end -->"
SIZES = ("ci", "cpu", "paper")
DATASET_WORDS = {"fmnist": "Fashion-MNIST", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100",
                 "digits": "scikit-learn's 8×8 digits", "synthetic": "a synthetic dataset"}
"""How the prose names each of ``fedlab.DATASETS`` (its registry stores no display name)."""
SKIPPED = ("00_quickstart",)
"""Notebooks without the section: the quickstart is the same small run at every size and saves nothing."""


def parameter_defaults(notebook: str, nb_dir: Path = NB_DIR) -> dict[str, Any]:
    """The names and default values of the notebook's ``parameters`` cell (its ``ci`` size, what papermill
    overrides), read from ``<nb_dir>/<notebook>.py`` without running it. ValueError naming the file when it has
    no such cell or a default is not a literal."""
    path = nb_dir / f"{notebook}.py"
    text = path.read_text()
    marker = '# %% tags=["parameters"]\n'
    if marker not in text:
        raise ValueError(f"{path}: no cell tagged 'parameters'")
    cell = text.split(marker, 1)[1].split("\n# %%", 1)[0]
    values: dict[str, Any] = {}
    for node in ast.parse(cell).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError as err:
                raise ValueError(f"{path}: parameter {node.targets[0].id} is not a literal ({err})") from None
    return values


def size_parameters(notebook: str, size: str, nb_dir: Path = NB_DIR) -> dict[str, Any] | None:
    """The parameters the notebook runs with at ``size``: the defaults, with ``params/<notebook>.<size>.yaml``
    laid over them for ``cpu`` and ``paper``; None when that file does not exist."""
    if size not in SIZES:
        raise ValueError(f"size={size!r} is not one of {', '.join(SIZES)}")
    defaults = parameter_defaults(notebook, nb_dir)
    if size == "ci":
        return defaults
    path = nb_dir / "params" / f"{notebook}.{size}.yaml"
    if not path.is_file():
        return None
    return defaults | (yaml.safe_load(path.read_text()) or {})


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def federation_words(p: dict[str, Any]) -> str:
    """What a parameter set trains, in words, from the fields it has (a toy's parameters give fewer words)."""
    parts = []
    datasets = p.get("datasets") or ([p["dataset"]] if p.get("dataset") else [])
    if datasets:
        parts.append(" and ".join(DATASET_WORDS.get(str(d), str(d)) for d in _listed(datasets)))
    models = p.get("models") or ([p["model"]] if p.get("model") else [])
    if models:
        parts.append("the " + " / ".join(str(m) for m in _listed(models)) + " model")
    if "train_size" in p and (datasets or models):
        parts.append("all training images" if p["train_size"] is None else f"{p['train_size']:,} training images")
    if p.get("n_clients") is not None:
        share = p.get("participation")
        parts.append(f"{p['n_clients']} clients" + (f", {share:.0%} per round" if isinstance(share, float) else ""))
    alpha = p.get("alpha", p.get("dirichlet_alpha"))
    if isinstance(alpha, (int, float)) and p.get("partition", "dirichlet") in ("dirichlet", "dirichlet_client") \
            and (datasets or models):
        parts.append(f"Dirichlet α = {alpha:g}")
    if p.get("rounds") is not None:
        steps = f" of K = {p['local_steps']} local steps" if p.get("local_steps") is not None else ""
        if steps and isinstance(p.get("lr"), (int, float)):
            steps += f" at η = {p['lr']:g}"
        parts.append(f"{p['rounds']} rounds{steps}")
    seeds = p.get("n_seeds")
    if seeds is not None:
        parts.append(f"{seeds} seed{'s' if seeds != 1 else ''}")
    if p.get("device") == "cuda":
        parts.append("on a GPU")
    return ", ".join(parts) if parts else "the toy problems of its parameters cell"


def how_made_lines(notebook: str, nb_dir: Path = NB_DIR) -> list[str]:
    """The section's markdown lines (between :data:`BEGIN` and :data:`END`)."""
    committed = _committed_cpu_figures(notebook)
    rows = []
    for size in SIZES:
        p = size_parameters(notebook, size, nb_dir)
        if p is None:
            continue
        where = ("the parameters cell's defaults, what the outputs above show" if size == "ci" else
                 f"`notebooks/params/{notebook}.{size}.yaml` over the defaults")
        use = {"ci": "a smoke test: every figure it draws is marked *smoke test* and goes to the scratch folder, "
                     "never cited; its numbers say the code runs, not which method wins",
               "cpu": (f"the evidence: its {committed} figure{'s' if committed != 1 else ''}, shown beside the text "
                       "and listed above with what stands behind each" if committed else
                       "a larger run of the same cells; none of its figures is kept"),
               "paper": "closer to the papers' scale; not run in this repository"}[size]
        rows.append(f"| `{size}` | {where} | {federation_words(p)} | {use} |")
    return [
        "This notebook runs at three sizes, chosen by parameters and never by editing its code:",
        "",
        "| size | parameters | federation | what it is for |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Run a size with `papermill notebooks/{notebook}.ipynb out.ipynb -f notebooks/params/{notebook}.cpu.yaml` "
        "(the JSON file beside each figure holds the exact command that made it); the words are explained once, on "
        "the running page named at the top.",
    ]


def _committed_cpu_figures(notebook: str) -> int:
    """How many committed cpu-size figures the notebook made (its sidecars in ``figures/``)."""
    from lab.evidence.report import cpu_figures

    return len(cpu_figures(notebook))


def section_of(text: str, path: Path | str = "the notebook") -> list[str]:
    """The lines between the markers in a py:percent notebook's text (comment marks removed); ValueError naming
    ``path`` when the markers are missing or out of order."""
    lines = [line[2:] if line.startswith("# ") else line.lstrip("#") for line in text.splitlines()]
    try:
        start, stop = lines.index(BEGIN), lines.index(END)
    except ValueError:
        raise ValueError(f"{path}: no '{BEGIN}' … '{END}' block (add the closing section)") from None
    if stop < start:
        raise ValueError(f"{path}: the end marker comes before the start marker")
    return lines[start + 1:stop]


def _notebooks(nb_dir: Path) -> list[str]:
    return [p.stem for p in sorted(nb_dir.glob("[0-9][0-9]*_*.py")) if p.stem not in SKIPPED]


def write(nb_dir: Path = NB_DIR, *, check: bool = False) -> list[str]:
    """Rewrite each notebook's section from its parameters (``check``: only report); returns the notebooks whose
    section was (or, checking, would be) changed. A notebook without the block gets it appended as its last cell."""
    changed = []
    for notebook in _notebooks(nb_dir):
        path = nb_dir / f"{notebook}.py"
        text = path.read_text()
        want = how_made_lines(notebook, nb_dir)
        block = "\n".join(["# " + BEGIN, *[("# " + line) if line else "#" for line in want], "# " + END])
        if BEGIN in text:
            if section_of(text, path) == want:
                continue
            head, rest = text.split("# " + BEGIN, 1)
            new = head + block + rest.split("# " + END, 1)[1]
        else:
            new = text.rstrip("\n") + "\n\n# %% [markdown]\n# ## How this evidence was made\n#\n" + block + "\n"
        changed.append(notebook)
        if not check:
            path.write_text(new)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the sections and pair the .ipynb (outputs kept)")
    mode.add_argument("--check", action="store_true", help="exit 1 if a section differs from its parameters")
    args = parser.parse_args(argv)
    changed = write(check=args.check)
    if args.check:
        for notebook in changed:
            print(f"{notebook}: 'How this evidence was made' is stale; run python -m lab.tools.how_made --write")
        return 1 if changed else 0
    from lab.tools.nbtools import NB_DIR as PAIRED, sync

    for notebook in changed:
        sync(PAIRED / f"{notebook}.py")
        print(f"{notebook}: section rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
