"""Build the fedlab book: the notebooks in order, a figure gallery, the API and the citation page.

    python notebooks/book/build.py                          # from the committed notebooks
    python notebooks/book/build.py --notebooks runs/book/executed   # from papermill's executed copies

Steps: (1) *stage* a Sphinx source folder under ``--out`` (default ``runs/book``): this folder's
``conf.py``, ``intro.md``, ``notation.md`` and ``guide/``, copies of the notebooks (never the committed files
themselves: the copies get one MyST target per saved figure so the gallery can link to the cell that made it),
the pages generated from the repository's own facts (README's notebook table, the figure sidecars,
the algorithm registry, CITATION.cff, ``figures/claims_cpu.md`` when it exists), the committed
figures and a local MathJax; (2) run ``sphinx-build -W --keep-going`` (warnings are errors);
(3) refuse a site that would load anything from the network.

Nothing is executed: myst-nb renders the stored outputs (``nb_execution_mode = "off"``).
"""
from __future__ import annotations

import argparse
import html.parser
import importlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import fields, is_dataclass
from pathlib import Path

import nbformat
import yaml

from lab.repro import RENAMED_NOTEBOOKS, notebook_now

BOOK_DIR = Path(__file__).resolve().parent
REPO = BOOK_DIR.parents[1]
FIGURES = REPO / "figures"
CLAIMS_FILE = FIGURES / "claims_cpu.md"
CITATION = REPO / "CITATION.cff"
CITING = BOOK_DIR / "citing.md"
"""How to cite a figure (version + commit): included in the generated citation page."""
MATHJAX_SYSTEM = Path("/usr/share/javascript/mathjax")
# The parts of MathJax 2.7 that the TeX-AMS_CHTML configuration loads (1.5 MB of the package's 54 MB).
MATHJAX_PARTS = ["MathJax.js", "config/TeX-AMS_CHTML.js", "extensions", "jax/input/TeX",
                 "jax/output/CommonHTML", "jax/element", "fonts/HTML-CSS/TeX/woff"]
NOTEBOOK_GLOB = "[0-9][0-9]*_*.ipynb"
GUIDES = ("running", "results", "data", "methods", "papers", "tracking", "sweeps", "cluster",
          "paper_profile", "flower")
"""The hand-written guide pages (``notebooks/book/guide/<name>.md``, linked from the README), in book order."""


class BookError(RuntimeError):
    """A fact the book is built from is missing or inconsistent (the message names the file)."""


# ---------------------------------------------------------------------------------------------
# facts read from the repository
# ---------------------------------------------------------------------------------------------

def notebook_paths(nb_dir: Path) -> list[Path]:
    paths = sorted(Path(nb_dir).glob(NOTEBOOK_GLOB))
    if not paths:
        raise BookError(f"no notebooks matching {NOTEBOOK_GLOB} in {nb_dir}")
    return paths


def notebook_title(nb: nbformat.NotebookNode, path: Path) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = re.search(r"^# (.+)$", cell.source, flags=re.M)
            if m:
                return m.group(1).strip()
    raise BookError(f"{path.name}: no '# title' heading in any markdown cell")


def readme_teaches(readme: Path = REPO / "README.md") -> dict[str, str]:
    """README's "The notebooks" table, ``{stem: what it teaches}`` (the one place this is written)."""
    rows = re.findall(r"^\| \[(\d\d[a-z]?_[\w]+)\]\([^)]*\) \| (.+?) \|\s*$", readme.read_text(), flags=re.M)
    return dict(rows)


def figure_records(figures_dir: Path = FIGURES) -> list[dict]:
    """One record per committed PNG: its sidecar, and the other files that belong to it."""
    records = []
    for png in sorted(figures_dir.glob("*.png")):
        sidecar = png.with_suffix(".json")
        if not sidecar.exists():
            raise BookError(f"{png.relative_to(REPO)} has no provenance sidecar {sidecar.name}")
        meta = json.loads(sidecar.read_text())
        for key in ("notebook", "caption"):
            if key not in meta:
                raise BookError(f"{sidecar.relative_to(REPO)}: missing field '{key}'")
        records.append({"name": png.stem, "png": png, "json": sidecar, "meta": meta,
                        "pdf": png.with_suffix(".pdf") if png.with_suffix(".pdf").exists() else None,
                        "data": data_files(png.stem, meta, figures_dir)})
    return records


def data_files(name: str, meta: dict, figures_dir: Path) -> list[Path]:
    """The numbers behind a figure: files the sidecar names, ``name.csv``, or a table its caption names."""
    named: list[str] = []
    for key in ("data", "data_file", "data_files"):
        value = meta.get(key)
        if isinstance(value, str):
            named.append(value)
        elif isinstance(value, list):
            named.extend(str(v) for v in value)
        elif isinstance(value, dict):
            named.extend(str(v) for v in value.values())
    named.append(f"{name}.csv")
    named.extend(re.findall(r"[\w\-]+\.(?:csv|parquet|json)\b", meta.get("caption", "")))
    found: list[Path] = []
    for entry in named:
        path = figures_dir / Path(entry).name
        if path.exists() and path.suffix != ".json" and path not in found:
            found.append(path)
    return found


def figure_cell_index(nb: nbformat.NotebookNode, name: str) -> int | None:
    """Index of the code cell that saves figure ``name``: ``save_figure(fig, "name", ...)`` (literal or
    f-string name), ``save_curves(...)`` with ``"name"`` as a literal in the cell, or a one-call figure
    helper named like the figure (``claims_forest(...)`` saves ``claims_forest``)."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if "save_curves(" in cell.source and re.search(rf"[\"']{re.escape(name)}[\"']", cell.source):
            return i
        if re.search(rf"(?<![\w.]){re.escape(name)}\(", cell.source):
            return i
        if "save_figure(" not in cell.source:
            continue
        for literal in re.findall(r"save_figure\(\s*\w+\s*,\s*f?[\"']([^\"']+)[\"']", cell.source):
            pattern = re.sub(r"\\\{[^}]*\\\}", ".+", re.escape(literal))
            if re.fullmatch(pattern, name):
                return i
    return None


def figure_label(name: str) -> str:
    return f"fig-{name}"


# ---------------------------------------------------------------------------------------------
# staged pages
# ---------------------------------------------------------------------------------------------

def stage_notebooks(nb_paths: list[Path], records: list[dict], dest: Path) -> dict[str, str]:
    """Copy the notebooks, adding a MyST target above each figure's cell; return ``{stem: title}``."""
    dest.mkdir(parents=True, exist_ok=True)
    by_notebook: dict[str, list[str]] = {}
    for rec in records:
        by_notebook.setdefault(notebook_now(rec["meta"]["notebook"]), []).append(rec["name"])
    titles = {}
    for rec in records:
        rec["cell_found"] = False
    for path in nb_paths:
        nb = nbformat.read(path, as_version=4)
        titles[path.stem] = notebook_title(nb, path)
        inserts = []
        for name in by_notebook.get(path.stem, []):
            index = figure_cell_index(nb, name)
            if index is None:  # e.g. a name computed at run time: the gallery links the notebook instead
                print(f"book: note: no cell of {path.name} visibly saves figure '{name}'", file=sys.stderr)
                continue
            inserts.append((index, name))
            next(r for r in records if r["name"] == name)["cell_found"] = True
        for index, name in sorted(inserts, reverse=True):
            nb.cells.insert(index, nbformat.v4.new_markdown_cell(f"({figure_label(name)})=",
                                                                 metadata={"tags": ["fedlab-book-target"]}))
        for i, cell in enumerate(nb.cells):  # nbformat requires unique ids after the inserts
            cell["id"] = f"c{i}"
        nbformat.write(nb, dest / path.name)
    return titles


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")


def landing_page(titles: dict[str, str], teaches: dict[str, str], claims: Path | None, version: str) -> str:
    missing = sorted(set(titles) - set(teaches))
    if missing:
        raise BookError(f"README.md's notebook table has no row for: {', '.join(missing)}")
    lines = [f"# fedlab {version}: sharpness-aware federated learning, explained and reproduced", "",
             (BOOK_DIR / "intro.md").read_text().strip(), "", "## The notebooks", "",
             "| | notebook | what it teaches |", "|---|---|---|"]
    for stem, title in titles.items():
        lines.append(f"| {stem.split('_')[0]} | [{_md_escape(title)}](notebooks/{stem}.ipynb) | {teaches[stem]} |")
    lines += ["", "(claims-table)=", "## Paper claims, checked on the committed cpu runs", ""]
    if claims is not None:
        lines += ["Generated by `python -m lab claims --write` from the stored results "
                  "(`figures/claims_cpu.md`); each verdict is computed, not written by hand.", "",
                  "```{include} _includes/claims_cpu.md", "```"]
    else:
        lines += [":::{note}", "No claims table has been generated yet: `figures/claims_cpu.md` does not "
                  "exist. `python -m lab claims --write` writes it from the stored cpu results; "
                  "the next build of this book shows it here.", ":::"]
    lines += ["", "## Also in this book", "",
              "- [Notation](notation.md): every symbol of the course, and which parameter name each one is "
              "printed as (the Dirichlet α_Dir is `alpha`/`dirichlet_alpha`; FedSWA's `alpha` is something else).",
              "- [The figure gallery](gallery.md): every committed figure with its notebook cell, data "
              "and provenance.",
              "- [API reference](api/index.md): `fedlab`, `fedlab.data`, `fedlab.analysis` and the "
              "algorithm registry with each method's update rules.",
              "- [Citing fedlab](citation.md): CITATION.cff and BibTeX of the repository and the papers.",
              "- Guides: " + ", ".join(f"[{_guide_title(g)}](guide/{g}.md)" for g in GUIDES) + ".", "",
              "```{toctree}", ":hidden:", ":caption: Notebooks", ""]
    lines += [f"notebooks/{stem}" for stem in titles]
    lines += ["```", "", "```{toctree}", ":hidden:", ":caption: Reference", "", "notation", "gallery", "api/index",
              "citation", "```", "", "```{toctree}", ":hidden:", ":caption: Guides", ""]
    lines += [f"guide/{g}" for g in GUIDES] + ["```", ""]
    return "\n".join(lines)


def _guide_title(name: str) -> str:
    path = BOOK_DIR / "guide" / f"{name}.md"
    first = path.read_text().splitlines()[0] if path.exists() else ""
    if not first.startswith("# "):
        raise BookError(f"{path}: a guide page must exist and open with its '# title'")
    return first[2:].strip()


def gallery_page(records: list[dict], titles: dict[str, str]) -> str:
    lines = ["# Figure gallery", "",
             "Every figure committed in `figures/`, in notebook order, with the cell that made it, the "
             "numbers it plots where they are committed, and its provenance sidecar (parameters, seed, "
             "run hashes, git commit, package versions). `make figures` rebuilds them all; the command "
             "under each figure rebuilds one.", ""]
    for rec in records:
        meta, name = rec["meta"], rec["name"]
        stem = notebook_now(meta["notebook"])
        files = [f"{{download}}`PNG <figures/{rec['png'].name}>`"]
        if rec["pdf"] is not None:
            files.append(f"{{download}}`PDF <figures/{rec['pdf'].name}>`")
        files.append(f"{{download}}`provenance (JSON) <figures/{rec['json'].name}>`")
        data = " · ".join(f"{{download}}`{p.name} <figures/{p.name}>`" for p in rec["data"])
        commit = str(meta.get("git_commit") or "unknown")[:12]
        lines += [f"## {name}", "",
                  f"![{_md_escape(meta['caption'])}](figures/{rec['png'].name})", "",
                  meta["caption"], "",
                  "- **made by** "
                  + (f"{{ref}}`{_md_escape(titles.get(stem, stem))} <{figure_label(name)}>` (the cell that saves it; "
                     if rec.get("cell_found") else
                     f"[{_md_escape(titles.get(stem, stem))}](notebooks/{stem}.ipynb) (the notebook; ")
                  + f"profile `{meta.get('profile', '?')}`, seed "
                  f"`{meta.get('seed')}`, commit `{commit}`, {meta.get('date', 'no date')})",
                  "- **data**: " + (data or "no data file committed for this figure"),
                  "- **files**: " + " · ".join(files)]
        if meta.get("command"):
            lines.append(f"- **rebuild**: `{meta['command']}`")
        lines.append("")
    return "\n".join(lines)


def api_pages(dest: Path) -> None:
    """autodoc pages for the public packages, and the registry page with each method's update rules."""
    import fedlab
    from fedlab.algorithms import algorithm_class

    dest.mkdir(parents=True, exist_ok=True)
    (dest / "index.md").write_text("\n".join([
        "# API reference", "",
        "Generated from the docstrings of this version of the code. The root package holds what a user "
        "imports (`Config`, `run`, results, registries); `fedlab.data` and `fedlab.analysis` the rest.", "",
        "```{toctree}", ":maxdepth: 1", "", "fedlab", "data", "analysis", "algorithms", "```", ""]))
    # Names the root re-exports from fedlab.data are documented there once (one description per object).
    in_data = sorted(n for n in fedlab.__all__
                     if getattr(getattr(fedlab, n), "__module__", "").startswith("fedlab.data"))
    for page, module, blurb in [
        ("fedlab", "fedlab", "The public face: configure, run and inspect an experiment."),
        ("data", "fedlab.data", "Datasets as tensors, partitioners and on-device augmentation."),
        ("analysis", "fedlab.analysis", "Curvature, landscapes, flatness incompatibility, friendly adversary."),
    ]:
        title = f"``{module}``"
        options = ["   :members:"]
        if module == "fedlab":
            blurb += (" Also importable from here, and documented in :mod:`fedlab.data`: "
                      + ", ".join(f"``{n}``" for n in in_data) + ".")
            options.append("   :exclude-members: " + ", ".join(in_data))
        # constants and type aliases have no docstring for autodoc to find: show their values
        mod = importlib.import_module(module)
        values = []
        for name in mod.__all__:
            obj = getattr(mod, name)
            if (name in in_data and module == "fedlab") or inspect.ismodule(obj) or isinstance(obj, type) \
                    or inspect.isfunction(obj):
                continue  # autodoc documents these (or fedlab.data does)
            text = re.sub(r"\s+", " ", repr(obj))
            values += [f".. py:data:: {name}", f"   :module: {module}",
                       f"   :value: {text[:300] + (' ...' if len(text) > 300 else '')}", ""]
        if values:
            values = ["", "Constants and type aliases", "-" * 26, "", *values]
        (dest / f"{page}.rst").write_text("\n".join([
            title, "=" * len(title), "", blurb, "", f".. automodule:: {module}", *options, "", *values]))
    lines = ["# The algorithm registry", "",
             "`fedlab.ALGORITHMS` names every registered method; `fedlab.get_algorithm(name, **params)` "
             "builds one. Each section below is the method's module docstring, shown verbatim (it is "
             "written for `help()`, in monospace): its update rules, the reference code it follows and "
             "that code's known deviations.", "",
             "| name | class | paper | gradient evaluations per local step |", "|---|---|---|---|"]
    for name in fedlab.ALGORITHMS:
        cls = algorithm_class(name)
        lines.append(f"| [`{name}`](#{name}) | `{cls.__name__}` | {_md_escape(str(cls.paper))} | "
                     f"{cls.grad_evals_per_step} |")
    lines.append("")
    for name in fedlab.ALGORITHMS:
        cls = algorithm_class(name)
        module_doc = inspect.getdoc(sys.modules[cls.__module__]) or ""
        class_doc = inspect.getdoc(cls) if cls.__doc__ else ""
        if not module_doc.strip():
            raise BookError(f"{cls.__module__}: the module docstring (the update rules) is empty")
        lines += [f"({name})=", f"## `{name}` — {cls.__name__}", "",
                  f"Module `{cls.__module__}`; paper: {_md_escape(str(cls.paper))}.", "",
                  "````text", module_doc, "````", ""]
        if class_doc and class_doc != module_doc:
            lines += ["````text", class_doc, "````", ""]
        if is_dataclass(cls.hparams_cls):
            defaults = [f"`{f.name}` = `{f.default!r}`" for f in fields(cls.hparams_cls)
                        if f.default is not inspect.Parameter.empty and not f.name.startswith("_")]
            lines += ["Hyperparameters and defaults: " + ", ".join(defaults) + ".", ""]
    (dest / "algorithms.md").write_text("\n".join(lines))


def _bibtex_authors(authors: list[dict]) -> str:
    names = []
    for a in authors:
        if "family-names" in a:
            names.append(f"{a['family-names']}, {a.get('given-names', '')}".strip(", "))
        elif a.get("name") == "others":  # BibTeX's own "et al."
            names.append("others")
        else:
            names.append("{" + a["name"] + "}")
    return " and ".join(names)


def bibtex_key(entry: dict) -> str:
    first = entry.get("authors", [{}])[0]
    who = first.get("family-names") or first.get("name", "anon")
    word = next((w for w in re.findall(r"[A-Za-z]+", entry.get("title", "")) if len(w) > 3), "x")
    year = entry.get("year") or str(entry.get("date-released", ""))[:4]
    return re.sub(r"[^a-z0-9]", "", f"{who}{year}{word}".lower())


def bibtex(entry: dict, kind: str | None = None) -> str:
    """One BibTeX entry from a CFF object (the software itself or one of its ``references``)."""
    kind = kind or {"article": "article", "conference-paper": "inproceedings",
                    "software": "software"}.get(entry.get("type", ""), "misc")
    fieldset = {"title": "{" + entry["title"] + "}", "author": _bibtex_authors(entry["authors"])}
    if kind == "software":
        fieldset["version"] = entry["version"]
        fieldset["year"] = str(entry["date-released"])[:4]
        fieldset["month"] = str(entry["date-released"])[5:7]
        if entry.get("repository-code"):
            fieldset["url"] = entry["repository-code"]
        fieldset["license"] = entry.get("license", "")
    else:
        fieldset["year"] = str(entry["year"])
        venue = entry.get("conference", {}).get("name") or entry.get("journal")
        if venue:
            fieldset["booktitle" if kind == "inproceedings" else "journal"] = venue
        for key in ("volume", "issue", "start", "end", "doi", "url"):
            if entry.get(key):
                name = {"issue": "number"}.get(key, key)
                fieldset[name] = str(entry[key])
        if entry.get("start") and entry.get("end"):
            fieldset.pop("start")
            fieldset.pop("end")
            fieldset["pages"] = f"{entry['start']}--{entry['end']}"
        ids = {i.get("type"): i.get("value") for i in entry.get("identifiers", [])}
        if entry.get("notes"):
            fieldset["note"] = entry["notes"]
        if ids.get("other", "").startswith("arXiv:"):
            fieldset["eprint"] = ids["other"].removeprefix("arXiv:")
            fieldset["archiveprefix"] = "arXiv"
    body = ",\n".join(f"  {k:<13} = {{{v}}}" for k, v in fieldset.items() if v)
    return f"@{kind}{{{bibtex_key(entry)},\n{body}\n}}"


def citation_page(cff_path: Path = CITATION) -> str:
    raw = cff_path.read_text()
    cff = yaml.safe_load(raw)
    url = cff.get("repository-code") or cff.get("url")
    lines = ["# Citing fedlab", "", cff["message"], "",
             f"- **title**: {cff['title']}",
             f"- **version**: {cff['version']} (`fedlab.__version__`; see `CHANGELOG.md`), released "
             f"{cff['date-released']}",
             f"- **licence**: {cff.get('license', 'not stated')}",
             f"- **repository**: {url}" if url else
             "- **repository**: no public repository URL is recorded in CITATION.cff yet",
             "", CITING.read_text().strip(), "",
             "## BibTeX: this repository", "", "```bibtex", bibtex(cff, "software"), "```", "",
             "## BibTeX: the papers of the methods", "",
             "Cite the paper of each method you use (the `references` of CITATION.cff).", ""]
    for ref in cff.get("references", []):
        lines += [f"### {ref.get('notes') or ref['title']}", "", "```bibtex", bibtex(ref), "```", ""]
    lines += ["## CITATION.cff", "", "```yaml", raw.rstrip(), "```", ""]
    return "\n".join(lines)


def copy_mathjax(dest: Path, source: Path = MATHJAX_SYSTEM) -> None:
    if not (source / "MathJax.js").exists():
        raise BookError(f"MathJax not found at {source}: install Debian's libjs-mathjax and fonts-mathjax "
                        "(apt-get install libjs-mathjax fonts-mathjax); the book never loads it from a CDN")
    for part in MATHJAX_PARTS:
        src, dst = source / part, dest / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dst)


def verify_published(records: list[dict], figures_dir: Path = FIGURES, claims: Path = CLAIMS_FILE) -> None:
    """Check what the book publishes against the evidence manifest (``figures/MANIFEST.sha256``) before
    anything is staged: the claims table (listed, and its bytes the listed ones) and every figure's
    sidecar and data file that is evidence. A BookError names the first file that fails, with the fix."""
    from lab.evidence.integrity import EvidenceError, evidence_files, read_listed

    evidence = set(evidence_files(figures_dir))
    published = [claims] + [path for rec in records for path in [rec["json"], *rec["data"]]]
    for path in published:
        if path != claims and path.name not in evidence:  # e.g. a table a caption names: not manifest evidence
            continue
        try:
            if read_listed(path, figures_dir) is None:  # absent and unlisted: nothing published from it
                continue
        except EvidenceError as err:
            raise BookError(f"refusing to publish unverified evidence: {err}") from None


def stage(nb_dir: Path, src: Path) -> Path:
    """Write the complete Sphinx source folder ``src`` (removed first)."""
    import fedlab

    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    shutil.copy2(BOOK_DIR / "conf.py", src / "conf.py")
    records = figure_records()
    verify_published(records)
    titles = stage_notebooks(notebook_paths(nb_dir), records, src / "notebooks")
    claims = None
    if CLAIMS_FILE.exists():
        (src / "_includes").mkdir()
        # the file's own "# title" would open a new top-level section outside the landing page's one
        body = [line for line in CLAIMS_FILE.read_text().splitlines() if not line.startswith("# ")]
        claims = src / "_includes" / CLAIMS_FILE.name
        claims.write_text("\n".join(body) + "\n")
    (src / "index.md").write_text(landing_page(titles, readme_teaches(), claims, fedlab.__version__))
    (src / "figures").mkdir()
    for rec in records:
        for path in [rec["png"], rec["json"], rec["pdf"], *rec["data"]]:
            if path is not None:
                shutil.copy2(path, src / "figures" / path.name)
    (src / "gallery.md").write_text(gallery_page(records, titles))
    shutil.copy2(BOOK_DIR / "notation.md", src / "notation.md")
    api_pages(src / "api")
    (src / "citation.md").write_text(citation_page())
    shutil.copytree(BOOK_DIR / "guide", src / "guide")
    copy_mathjax(src / "_static" / "mathjax")
    return src


# ---------------------------------------------------------------------------------------------
# build and offline check
# ---------------------------------------------------------------------------------------------

class _AssetParser(html.parser.HTMLParser):
    """Collects the URLs a page *loads* (scripts, styles, images, frames), not the links it shows."""

    LOADS = {"script": "src", "img": "src", "iframe": "src", "source": "src", "link": "href"}

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = self.LOADS.get(tag)
        values = dict(attrs)
        if attr and values.get(attr):
            if tag == "link" and values.get("rel") not in ("stylesheet", "preload", "icon", "modulepreload"):
                return
            self.urls.append(values[attr])


def remote_assets(html_dir: Path) -> list[tuple[str, str]]:
    """``(file, url)`` for every http(s) or protocol-relative asset a built page or stylesheet loads."""
    remote = re.compile(r"^(?:https?:)?//", re.I)
    found = []
    for page in sorted(html_dir.rglob("*.html")):
        parser = _AssetParser()
        parser.feed(page.read_text(errors="replace"))
        found += [(str(page.relative_to(html_dir)), u) for u in parser.urls if remote.match(u)]
    for sheet in sorted(html_dir.rglob("*.css")):
        for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", sheet.read_text(errors="replace")):
            if remote.match(url):
                found.append((str(sheet.relative_to(html_dir)), url))
        for url in re.findall(r"@import\s+['\"]([^'\"]+)", sheet.read_text(errors="replace")):
            if remote.match(url):
                found.append((str(sheet.relative_to(html_dir)), url))
    return found


def sphinx_build(src: Path, html_dir: Path, doctrees: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", "-d", str(doctrees),
           str(src), str(html_dir)]
    if subprocess.run(cmd, env=env).returncode != 0:
        raise BookError("sphinx-build reported warnings or errors (see above); warnings are errors here")


def redirect_page(new: str) -> str:
    """A page that sends the reader on to ``new.html`` (a renamed notebook's old address), with no script."""
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0; url={new}.html">'
            f'<link rel="canonical" href="{new}.html"><title>Moved to {new}</title></head>\n'
            f'<body><p>This notebook is now <a href="{new}.html">{new}</a>.</p></body></html>\n')


def write_redirects(pages: Path) -> list[Path]:
    """For each renamed notebook (:data:`lab.repro.RENAMED_NOTEBOOKS`), ``<old>.html`` redirecting to today's page,
    so links and citations of the old address keep working. BookError if today's page was not built."""
    written = []
    for old, new in sorted(RENAMED_NOTEBOOKS.items()):
        if not (pages / f"{new}.html").is_file():
            raise BookError(f"{old} was renamed to {new}, but the book has no page {new}.html to redirect to")
        (pages / f"{old}.html").write_text(redirect_page(new))
        written.append(pages / f"{old}.html")
    return written


def build(nb_dir: Path, out: Path) -> Path:
    """Stage and build; return the landing page ``out/html/index.html``."""
    start = time.perf_counter()
    src = stage(nb_dir, out / "src")
    html_dir = out / "html"
    for stale in (html_dir, out / "doctrees"):  # staged sources are new: build from scratch
        if stale.exists():
            shutil.rmtree(stale)
    sphinx_build(src, html_dir, out / "doctrees")
    write_redirects(html_dir / "notebooks")
    remote = remote_assets(html_dir)
    if remote:
        listing = "\n".join(f"  {page}: {url}" for page, url in remote[:20])
        raise BookError(f"the built book loads {len(remote)} asset(s) from the network:\n{listing}")
    print(f"book: {html_dir / 'index.html'} ({len(list(html_dir.rglob('*.html')))} pages, "
          f"{time.perf_counter() - start:.0f} s, offline)")
    return html_dir / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", type=Path, default=REPO / "notebooks",
                        help="folder of NN_*.ipynb to render (default: the committed notebooks/)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "book",
                        help="build folder: src/ (staged sources), html/ (the site), doctrees/")
    args = parser.parse_args(argv)
    try:
        build(args.notebooks.resolve(), args.out.resolve())
    except BookError as err:
        print(f"book: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
