"""A digest of the code a run executes, for the run key (:meth:`fedlab.config.Config.hash`).

A cached run is only valid for the code that produced it: an edited algorithm, a changed batch
order or model initialisation must not return the old θ. The key therefore covers the source of the
*numeric path* — the subpackages ``algorithms``, ``engine``, ``models``, ``data``, the module
``config``, and the seed-derivation functions of ``_rng`` (every random draw goes through them).
The rule that turns a finished run into ``collapsed`` (``engine/collapse.py``) is on that path too: it
decides a run's status, which decides whether a seed counts.

What is hashed is the **abstract syntax tree** of each module, with every bare string statement
(module, class, function and attribute docstrings) removed, not the bytes of the file. Comments and
docstrings are not in the tree, and formatting (blank lines, line breaks, spacing) does not change
it, so documentation edits keep every cached run and committed run record valid, while any change
to a statement, expression, constant or name — anything that could change the numbers — gives a new
key. Line numbers are excluded (``ast.dump`` without attributes).

The digest is of the code's **content, not its layout**: each module is cut into its top-level
statements (functions, classes, constants), import statements are dropped, and the SHA-256 is over
the sorted multiset of those statements' dumps. Moving a module, renaming its file, splitting it or
merging two, or changing where a name is imported from keeps the key (and every committed record)
valid, as long as the moved code stays on the numeric path; changing any statement changes the key.
What the key cannot see: code outside the numeric path; an import that binds a name to another
library's function of the same name (``from math import sqrt`` → ``from numpy import sqrt``), since
imports are dropped; the installed versions of torch and numpy; and patches applied in-process at run
time (monkeypatching an algorithm or the engine). A run made under such a change must not be kept:
delete its run directory (and never commit its record).

Deliberately *not* covered, as they never change a run's numbers: ``analysis/`` (reads finished runs), ``results``, ``cli``,
``sweep``, and the lab beside the library (plots, figures, benchmarks, evidence) and the notebooks.
"""
from __future__ import annotations

import ast
import hashlib
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # fedlab/ (this file is fedlab/store/code_digest.py)
NUMERIC_PACKAGES = ("algorithms", "engine", "models", "data")
NUMERIC_MODULES = ("config.py",)
# the seed derivation every random draw goes through (its three functions, by name)
REPRO_FUNCTIONS = ("derive_seed", "torch_generator", "numpy_generator")
REPRO_MODULE = "_rng.py"


class _DropDocstrings(ast.NodeTransformer):
    """Remove bare string statements (docstrings), and with ``imports=True`` import statements at any
    depth; a body left empty gets a ``pass``."""

    def __init__(self, imports: bool = False) -> None:
        self.imports = imports

    def _dropped(self, stmt: ast.stmt) -> bool:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            return True
        return self.imports and isinstance(stmt, (ast.Import, ast.ImportFrom))

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and all(isinstance(s, ast.stmt) for s in body):
                kept = [s for s in body if not self._dropped(s)]
                if not kept and name == "body":
                    kept = [ast.Pass()]
                setattr(node, name, kept)
        return node


def module_digest_text(source: str) -> str:
    """``ast.dump`` of ``source`` without docstrings and without line numbers."""
    return ast.dump(_DropDocstrings().visit(ast.parse(source)), include_attributes=False)


def statement_digests(source: str) -> list[str]:
    """SHA-256 (hex) of each top-level statement of ``source``, with docstrings and imports (at any depth) removed."""
    tree = _DropDocstrings(imports=True).visit(ast.parse(source))
    return [hashlib.sha256(ast.dump(node, include_attributes=False).encode()).hexdigest()
            for node in tree.body if not isinstance(node, ast.Pass)]


def _repro_source(package: Path) -> str:
    tree = ast.parse((package / REPRO_MODULE).read_text(encoding="utf-8"))
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in REPRO_FUNCTIONS]
    missing = set(REPRO_FUNCTIONS) - {f.name for f in funcs}
    if missing:  # a rename must be reflected here, or the key would silently stop covering it
        raise RuntimeError(f"fedlab.store.code_digest: {REPRO_MODULE} lacks {sorted(missing)}")
    return ast.unparse(ast.Module(body=funcs, type_ignores=[]))


def numeric_sources(package: Path = PACKAGE) -> list[Path]:
    """The module files whose code enters the digest, in a fixed order."""
    files = [package / m for m in NUMERIC_MODULES]
    for pkg in NUMERIC_PACKAGES:
        files += sorted((package / pkg).rglob("*.py"))
    return files


def package_digest(package: Path) -> str:
    """SHA-256 (hex) over the sorted statement digests of every numeric-path module of ``package``."""
    digests: list[str] = []
    for path in numeric_sources(package):
        digests += statement_digests(path.read_text(encoding="utf-8"))
    digests += statement_digests(_repro_source(package))
    return hashlib.sha256("\n".join(sorted(digests)).encode()).hexdigest()


class CodeWatch:
    """The digest of ``package`` when this object was made, and whether the files still give it.

    A process keys its runs with the digest it computed once; if someone edits the numeric code while
    a run trains, modules imported later would run new code under the old key. :meth:`changed`
    looks at the files' sizes and modification times (cheap, every checkpoint) and only re-hashes
    when one of them moved."""

    def __init__(self, package: Path) -> None:
        self.package = package
        self.stats = self._stats()
        self.digest = package_digest(package)

    def _stats(self) -> tuple[tuple[str, int, int], ...]:
        stats = ((f, f.stat()) for f in numeric_sources(self.package) + [self.package / REPRO_MODULE])
        return tuple((str(f), st.st_mtime_ns, st.st_size) for f, st in stats)

    def changed(self) -> str | None:
        """None while the files give :attr:`digest`, else the digest they give now."""
        if self._stats() == self.stats:
            return None
        now = package_digest(self.package)
        return None if now == self.digest else now


@lru_cache(maxsize=1)
def _watch() -> CodeWatch:
    return CodeWatch(PACKAGE)


def code_digest() -> str:
    """:func:`package_digest` of this fedlab (computed once per process)."""
    return _watch().digest


def code_changed() -> str | None:
    """None while this fedlab's numeric code on disk is what :func:`code_digest` hashed; else the new digest."""
    return _watch().changed()
