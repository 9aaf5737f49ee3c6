"""The repository cites only what it ships (issue 47, item 5).

fedlab was written beside its developers' internal notes (a specification of every method's update
rules, a digest of the papers, a style guide), which are not part of the repository: a reader cannot
open them. What a reader needs from them is on the book's pages, the papers page
(``notebooks/book/guide/papers.md``) and the methods page (``notebooks/book/guide/methods.md``). These
tests fail when

* a notebook's cells, a Python file (docstring or comment), a YAML file, a book page or a README cites
  one of those notes again (by file name, or by a path into the folder they live in);
* a relative markdown link to a ``.md`` or ``.ipynb`` file, or a ``guide/<page>.md#<anchor>`` reference
  in any of those files, points at a page or a heading that does not exist;
* the papers page and ``figures/claims.yaml`` or ``CITATION.cff`` drift apart: every claim's id and the
  paper's numbers it compares with stand in its paper's section, and every section names a paper of
  ``CITATION.cff`` with its year.

Notebook outputs are not read: they are written when a notebook is executed. The generated blocks of
the READMEs and ``figures/claims_cpu.md`` are checked on their own (``python -m lab claims --write``
rewrites them from ``figures/claims.yaml``).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "notebooks" / "book"
GUIDE = BOOK / "guide"
PAPERS_PAGE = GUIDE / "papers.md"

# The internal notes, by name. The names are assembled here so that this file does not cite them itself.
_NOTES = ("ALGORITHMS", "PAPERS", "STYLE", "DESIGN", "NOTEBOOKS", "ENVIRONMENT")
OUTSIDE = re.compile("|".join([
    r"\b(?:" + "|".join(_NOTES) + r")\.md\b",      # a note by its file name
    r"\bshared/(?:docs|seeds)\b",                  # the folder the notes and the papers' texts live in
    r"\.\./shared\b",                              # anything beside the repository's root
]))

SKIP_DIRS = {".git", ".venv", "runs", "data", "__pycache__", ".ipynb_checkpoints", "build", "node_modules"}
SKIP_PATHS = {REPO / "figures" / "records", REPO / "figures" / "_scratch"}
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".cff", ".toml", ".cfg", ".txt", ".ipynb"}
TEXT_NAMES = {"Makefile"}
GENERATED_FILES = {REPO / "figures" / "claims_cpu.md"}
"""Written whole by ``python -m lab claims --write``; the READMEs hold generated blocks between markers."""
BLOCK = re.compile(r"<!-- fedlab:(\w+):start -->.*?<!-- fedlab:\1:end -->", re.S)
BOOK_GENERATED = {"index.md", "gallery.md", "citation.md", "api/index.md", "api/algorithms.md"}
"""Pages ``notebooks/book/build.py`` writes into the staged book (relative to its root); links to them
resolve only in the built book."""


def _scanned_files() -> list[Path]:
    found = []
    for path in sorted(REPO.rglob("*")):
        rel_parts = path.relative_to(REPO).parts
        if any(part in SKIP_DIRS for part in rel_parts) or any(s in path.parents for s in SKIP_PATHS):
            continue
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES):
            found.append(path)
    return found


FILES = _scanned_files()


def _text(path: Path) -> str:
    """A file's text; of a notebook only its cells' sources, one cell after another."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".ipynb":
        return raw
    cells = json.loads(raw)["cells"]
    return "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)


def _split_generated(path: Path, text: str) -> tuple[str, str]:
    """``(hand-written, generated)`` text of a file; line numbers of the hand-written part are kept."""
    if path in GENERATED_FILES:
        return "", text
    generated = []

    def blank(m: re.Match) -> str:
        generated.append(m.group(0))
        return "\n" * m.group(0).count("\n")
    return BLOCK.sub(blank, text), "\n".join(generated)


def _outside_citations(text: str) -> list[str]:
    return [f"{n}: {line.strip()[:160]}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


def test_the_scan_covers_every_kind_of_file_it_promises():
    rel = {p.relative_to(REPO).as_posix() for p in FILES}
    for expected in ("README.md", "CITATION.cff", "figures/claims.yaml", "notebooks/07_fednsam.py",
                     "notebooks/07_fednsam.ipynb", "notebooks/book/guide/methods.md", "fedlab/algorithms/base.py",
                     "lab/evidence/claims/spec.py", "tests/reference.py", "tests/test_references.py"):
        assert expected in rel, f"{expected} is not scanned"
    assert not any(r.startswith(("runs/", ".venv/", "figures/records/")) for r in rel)


def test_the_pattern_catches_each_way_of_citing_a_note():
    for name in _NOTES:
        assert OUTSIDE.search(f"see {name}.md §3"), name
    assert OUTSIDE.search("(see `" + "shared" + "/docs/x`)") and OUTSIDE.search("../" + "shared/x")
    for fine in ("fedlab.ALGORITHMS", "COLLAPSED_STYLE = {}", "--runs-dir /shared/fedlab-runs", "lab/README.md"):
        assert not OUTSIDE.search(fine), fine


def test_no_hand_written_file_cites_a_file_outside_the_repository():
    bad = []
    for path in FILES:
        written, _ = _split_generated(path, _text(path))
        bad += [f"{path.relative_to(REPO)}:{hit}" for hit in _outside_citations(written)]
    assert not bad, ("these cite the developers' internal notes, which the repository does not ship; cite the "
                     "book's papers or methods page instead (guide/papers.md#<method>, guide/methods.md#<method>):\n"
                     + "\n".join(bad))


def test_no_generated_table_cites_a_file_outside_the_repository():
    bad = []
    for path in FILES:
        _, generated = _split_generated(path, _text(path))
        if _outside_citations(generated):
            bad.append(str(path.relative_to(REPO)))
    assert not bad, (f"generated text in {', '.join(bad)} cites a file outside the repository: fix the source "
                     "(figures/claims.yaml) and run `python -m lab claims --write`")


# --- links and anchors -----------------------------------------------------------------------------

def _slug(heading: str) -> str:
    """myst-parser's "github" slug (``myst_heading_slug_func`` in the book's conf.py), as GitHub makes it."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"`|\*{1,2}", "", text).strip()  # code and emphasis marks
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", text.lower().replace(" ", "-"))


def anchors(page: Path) -> set[str]:
    """The headings' slugs and the explicit MyST targets ``(name)=`` of a markdown page."""
    text = re.sub(r"^(`{3,}|~{3,}).*?^\1", "", page.read_text(), flags=re.S | re.M)  # not inside code blocks
    found = {_slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M)}
    return found | set(re.findall(r"^\(([\w-]+)\)=\s*$", text, flags=re.M))


def test_slugs_are_the_books():
    assert _slug("How the reference code bases differ") == "how-the-reference-code-bases-differ"
    assert _slug("fedsmoo_adaptive") == "fedsmoo_adaptive" and _slug("FedVSSAM") == "fedvssam"
    assert _slug("Methods: paper, official code and fedlab") == "methods-paper-official-code-and-fedlab"


LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")


def _markdown_sources() -> list[tuple[Path, str]]:
    """Every markdown text: .md files (generated blocks included) and the notebooks' markdown cells."""
    out = []
    for path in FILES:
        if path.suffix == ".md":
            out.append((path, path.read_text()))
        elif path.suffix == ".ipynb":
            cells = json.loads(path.read_text())["cells"]
            out += [(path, "".join(c["source"])) for c in cells if c["cell_type"] == "markdown"]
    return out


def _resolve(source: Path, target: str) -> tuple[Path | None, str | None]:
    """``(file, problem)``: the file a link's path means (None for a generated book page) or why it is broken."""
    if BOOK in source.parents:
        in_book = (source.parent.relative_to(BOOK) / target)
        parts: list[str] = []
        for part in in_book.parts:
            if part == "..":
                if not parts:
                    return None, "leaves the book"
                parts.pop()
            elif part != ".":
                parts.append(part)
        rel = "/".join(parts)
        if rel in BOOK_GENERATED:
            return None, None
        if rel.startswith("notebooks/"):  # build.py stages the notebooks there
            path = REPO / rel
        else:
            path = BOOK / rel
    else:
        path = (source.parent / target).resolve()
        if source.suffix == ".ipynb" and BOOK in path.parents:
            return None, ("a notebook's link into the book resolves in the repository but not in the built book; "
                          "name the page as a path in backticks")
    return (path, None) if path.is_file() else (None, f"{path.relative_to(REPO) if REPO in path.parents else path} "
                                                    "does not exist")


def test_every_relative_link_to_a_page_or_notebook_resolves():
    bad = []
    for source, text in _markdown_sources():
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                continue
            path_part, _, anchor = target.partition("#")
            if path_part and not path_part.endswith((".md", ".ipynb")):
                continue
            where = f"{source.relative_to(REPO)}: ({target})"
            if not path_part:
                path, problem = source, None
            else:
                path, problem = _resolve(source, path_part)
            if problem:
                bad.append(f"{where}: {problem}")
            elif path is not None and anchor and path.suffix == ".md" and anchor not in anchors(path):
                bad.append(f"{where}: no heading or target '#{anchor}' in {path.relative_to(REPO)}")
    assert not bad, "broken links:\n" + "\n".join(bad)


GUIDE_REF = re.compile(r"\bguide/([\w-]+)\.md(?:#([\w-]+))?")


def test_every_guide_page_reference_names_a_page_and_heading_that_exist():
    """``guide/methods.md#fednsam`` in a docstring, a YAML file or a notebook's backticks is a citation too."""
    bad = []
    for path in FILES:
        for n, line in enumerate(_text(path).splitlines(), 1):
            for page, anchor in GUIDE_REF.findall(line):
                target = GUIDE / f"{page}.md"
                if not target.is_file():
                    bad.append(f"{path.relative_to(REPO)}:{n}: guide/{page}.md does not exist")
                elif anchor and anchor not in anchors(target):
                    bad.append(f"{path.relative_to(REPO)}:{n}: no heading '#{anchor}' in guide/{page}.md")
    assert not bad, "\n".join(bad)


def test_the_checks_fail_on_a_broken_link_and_a_missing_anchor(tmp_path):
    page = GUIDE / "methods.md"
    assert "fednsam" in anchors(page) and "no-such-section" not in anchors(page)
    path, problem = _resolve(GUIDE / "papers.md", "no_such_page.md")
    assert path is None and "does not exist" in problem
    assert _resolve(GUIDE / "paper_profile.md", "../citation.md") == (None, None)  # generated by build.py
    path, problem = _resolve(REPO / "notebooks" / "07_fednsam.ipynb", "book/guide/methods.md")
    assert path is None and "built book" in problem


# --- the papers page against claims.yaml and CITATION.cff ----------------------------------------------

def _sections(page: Path) -> dict[str, str]:
    """``{anchor: text}`` of the page's level-2 sections."""
    parts = re.split(r"^## (.+)$", page.read_text(), flags=re.M)
    return {_slug(title): body for title, body in zip(parts[1::2], parts[2::2])}


def _section_of(paper: str) -> str:
    """The papers page's anchor for a claim's ``source.paper``: "FedSWA/FedMoSWA (ICML 2025)" → fedswa."""
    return _slug(re.split(r"[\s/]", paper.strip(), maxsplit=1)[0])


def _mentions(text: str, number: float) -> bool:
    return re.search(rf"(?<![\d.]){re.escape(f'{abs(number):g}')}(?!\.?\d)", text) is not None


CLAIMS = yaml.safe_load((REPO / "figures" / "claims.yaml").read_text())["claims"]


@pytest.mark.parametrize("claim", CLAIMS, ids=[c["id"] for c in CLAIMS])
def test_each_claim_and_its_papers_numbers_stand_in_its_papers_section(claim):
    sections = _sections(PAPERS_PAGE)
    anchor = _section_of(claim["source"]["paper"])
    assert anchor in sections, f"{claim['id']}: the papers page has no section '#{anchor}'"
    body = sections[anchor]
    assert f"`{claim['id']}`" in body, f"{claim['id']} is not listed in guide/papers.md#{anchor}"
    effect = claim["effect"]
    numbers = [effect[k] for k in ("left", "right") if k in effect] or [effect[k] for k in ("value",) if k in effect]
    missing = [x for x in numbers if not _mentions(body, float(x))]
    assert not missing, f"{claim['id']}: the paper's {missing} are not in guide/papers.md#{anchor}"


def test_each_papers_section_names_a_cited_paper_with_its_year():
    references = yaml.safe_load((REPO / "CITATION.cff").read_text())["references"]
    for anchor, body in _sections(PAPERS_PAGE).items():
        opening = body.strip().split("\n\n")[0]
        titles = [" ".join(t.split()) for t in re.findall(r'"([^"]+)"', opening)]
        cited = [r for r in references if r["title"] in titles]
        assert cited, f"guide/papers.md#{anchor}: no title of CITATION.cff's references in {titles}"
        for ref in cited:
            assert str(ref["year"]) in opening, f"guide/papers.md#{anchor}: {ref['title']!r} without its year"


def test_the_papers_page_is_in_the_book():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fedlab_book_build_refs", BOOK / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert "papers" in build.GUIDES
    assert "notebooks/book/guide/papers.md" in (REPO / "README.md").read_text()
