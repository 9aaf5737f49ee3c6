"""A digest of the code a run executes, for the run key (:meth:`fedlab.config.Config.hash`).

A cached run is valid only for the code that produced it, so the key covers the *numeric path*:
``algorithms``, ``engine`` (the collapse rule included: it decides whether a seed counts),
``models``, ``data``, ``config`` and the seed derivation of ``_rng``. What is hashed is each
module's syntax tree without docstrings, comments or line numbers, cut into top-level statements
with imports dropped: the SHA-256 over the sorted statement digests. Documentation edits, moving,
renaming, splitting or merging modules on the path keep every cached run and committed record;
changing any statement gives a new key. Not seen: code off the path (``analysis``, ``results``,
``cli``, ``sweep``, the lab, notebooks — none changes a number), an import rebinding a name to
another library's function, torch's and numpy's versions, in-process monkeypatches (a run made so
must not be kept)."""
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
    """Remove bare string statements (docstrings) and import statements at any depth; a body left empty
    gets a ``pass``."""

    @staticmethod
    def _dropped(stmt: ast.stmt) -> bool:
        return isinstance(stmt, (ast.Import, ast.ImportFrom)) or (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str))

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


def statement_digests(source: str) -> list[str]:
    """SHA-256 (hex) of each top-level statement of ``source``, with docstrings and imports (at any depth) removed."""
    tree = _DropDocstrings().visit(ast.parse(source))
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
    """The digest of ``package`` when made, and whether the files still give it: a run keyed once must
    notice numeric code edited while it trains. :meth:`changed` compares sizes and mtimes (cheap, every
    checkpoint) and re-hashes only when one moved."""

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
