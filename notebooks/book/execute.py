"""Execute every notebook with papermill at the ci size, one parameter overridden, and check it.

    python notebooks/book/execute.py                    # -p seed 1, into runs/book/executed/
    python notebooks/book/execute.py --jobs 2 -p seed 2 --out DIR [NN ...]

This is CI's papermill step (nbval separately replays the committed outputs). The committed
``notebooks/*.ipynb`` are only read; the executed copies go to ``--out``, from which ``make book
EXECUTE=1`` builds the book. A notebook passes when papermill finished it, the injected cell holds
the overrides, no cell has an error output, and every ``# NBVAL_CHECK_OUTPUT`` cell printed what its
committed twin printed *up to the numbers* (digits masked: with another seed the numbers change, the
statements, their order and their booleans must not) — see :func:`check_outputs`.
"""
from __future__ import annotations

import argparse
import ast
import concurrent.futures
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat

BOOK_DIR = Path(__file__).resolve().parent
REPO = BOOK_DIR.parents[1]
NB_DIR = REPO / "notebooks"
CHECK_MARK = "NBVAL_CHECK_OUTPUT"
_NUMBER = re.compile(r"[-+−]?(?:\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?|\.\d+)%?")


def mask_numbers(text: str) -> str:
    """The statement a check cell prints, every number replaced by ``#`` and runs of blanks by one
    (tables are padded to their widest number)."""
    return "\n".join(re.sub(r"[ \t]+", " ", _NUMBER.sub("#", line)).strip() for line in text.splitlines())


def _stdout(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.output_type == "stream" and o.name == "stdout")


def check_outputs(committed: nbformat.NotebookNode, executed: nbformat.NotebookNode,
                  overrides: dict[str, object]) -> list[str]:
    """Problems of an executed copy against its committed notebook (empty: it passes)."""
    problems = []
    meta = executed.metadata.get("papermill", {})
    if meta.get("exception"):
        problems.append("papermill recorded an exception")
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    if overrides:
        if len(injected) != 1:
            problems.append("papermill did not inject the parameters cell")
        else:
            assigned = {t.id: ast.literal_eval(n.value) for n in ast.parse(injected[0].source).body
                        if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
            for name, value in overrides.items():
                if assigned.get(name) != value:
                    problems.append(f"injected cell does not set {name} = {value!r}")
    cells = [c for c in executed.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    if [c.source for c in cells] != [c.source for c in committed.cells]:
        problems.append("executed cells differ from the committed notebook's cells")
        return problems
    for i, (ref, run) in enumerate(zip(committed.cells, cells)):
        if run.cell_type != "code":
            continue
        if run.get("execution_count") is None:
            problems.append(f"cell {i} was not executed")
        for out in run.outputs:
            if out.output_type == "error":
                problems.append(f"cell {i} raised {out.ename}: {out.evalue}")
        if CHECK_MARK in run.source:
            want, got = mask_numbers(_stdout(ref)), mask_numbers(_stdout(run))
            if not got.strip():
                problems.append(f"check cell {i} printed nothing")
            elif got != want:
                diff = [(w, g) for w, g in zip(want.splitlines(), got.splitlines()) if w != g][:3]
                if len(want.splitlines()) != len(got.splitlines()):
                    diff.append((f"{len(want.splitlines())} lines", f"{len(got.splitlines())} lines"))
                problems.append(f"check cell {i} printed other statements than committed: "
                                + "; ".join(f"{w!r} -> {g!r}" for w, g in diff))
    return problems


def execute_one(path: Path, out_dir: Path, params: list[tuple[str, str]], timeout: int) -> tuple[Path, float, str]:
    out = out_dir / path.name
    cmd = [sys.executable, "-m", "papermill", str(path), str(out), "-k", "python3", "--cwd", str(NB_DIR),
           "--execution-timeout", str(timeout), "--no-progress-bar", "--log-level", "WARNING"]
    for name, value in params:
        cmd += ["-p", name, value]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    log = (proc.stdout + proc.stderr)[-4000:] if proc.returncode else ""
    return out, time.perf_counter() - start, log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("select", nargs="*", help="notebook prefixes (default: all)")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                        help="papermill parameter override (default: seed 1)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "book" / "executed")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks executed at once (default 2)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    args = parser.parse_args(argv)
    params = [tuple(p) for p in (args.parameter or [("seed", "1")])]
    overrides = {}
    for name, value in params:
        try:
            overrides[name] = ast.literal_eval(value)  # papermill -p reads values as Python literals
        except (ValueError, SyntaxError):
            overrides[name] = value
    paths = sorted(NB_DIR.glob("[0-9][0-9]*_*.ipynb"))
    if args.select:
        paths = [p for p in paths if any(p.name.split("_")[0] == s or ("_" in s and p.name.startswith(s))
                                         for s in args.select)]
    if not paths:
        print("execute: no notebooks selected", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in args.out.glob("*.ipynb"):
        stale.unlink()
    start, failed = time.perf_counter(), []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(execute_one, p, args.out, params, args.timeout): p for p in paths}
        for future in concurrent.futures.as_completed(futures):
            path = futures[future]
            out, seconds, log = future.result()
            problems = [f"papermill failed:\n{log}"] if log else []
            if out.exists():
                problems += check_outputs(nbformat.read(path, as_version=4), nbformat.read(out, as_version=4),
                                          overrides)
            else:
                problems.append("no executed copy was written")
            status = "ok" if not problems else "FAILED"
            print(f"execute: {path.name:<36} {seconds:6.1f} s  {status}", flush=True)
            for problem in problems:
                print(f"    {problem}", flush=True)
            if problems:
                failed.append(path.name)
    print(f"execute: {len(paths) - len(failed)}/{len(paths)} notebooks passed "
          f"({', '.join(f'{n} {v!r}' for n, v in overrides.items())}; {args.jobs} at a time) in "
          f"{time.perf_counter() - start:.0f} s; copies in {args.out}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
