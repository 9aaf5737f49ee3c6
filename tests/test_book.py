"""The book: built offline from the committed notebooks (warnings are errors), then read in Chromium.

The build runs once per module (~30 s of CPU); the browser checks open the landing page, one notebook
page and the gallery, and walk the prev/next chain through every page. The landing page's
screenshot goes to ``runs/book/landing.png`` (not committed).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from lab.repro import RENAMED_NOTEBOOKS, notebook_now

from _browser import BROKEN_IMAGES_JS, chromium_page, needs_chromium
from _load import window_ms

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_STEMS = [p.stem for p in sorted((REPO / "notebooks").glob("[0-9][0-9]*_*.ipynb"))]
FIGURE_PNGS = sorted(p.name for p in (REPO / "figures").glob("*.png"))
CLAIMS = REPO / "figures" / "claims_cpu.md"
SCREENSHOT = REPO / "runs" / "book" / "landing.png"


def _load_build_module():
    spec = importlib.util.spec_from_file_location("fedlab_book_build", REPO / "notebooks" / "book" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


book = _load_build_module()
needs_mathjax = pytest.mark.skipif(not (book.MATHJAX_SYSTEM / "MathJax.js").exists(),
                                   reason="Debian's libjs-mathjax is not installed (.ci/run installs it)")


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The book built once per test session, also under pytest-xdist (workers share it, under a lock)."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's folder
    out = shared / "book-site"
    with open(shared / "book-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "built").exists():
            proc = subprocess.run([sys.executable, str(REPO / "notebooks" / "book" / "build.py"), "--out", str(out)],
                                  capture_output=True, text=True, cwd=REPO)
            assert proc.returncode == 0, f"book build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
            (out / "built").touch()
    return out / "html"


def _file_url(path: Path) -> str:
    return path.resolve().as_uri()


def _nav(page_html: Path) -> dict[str, Path | None]:
    """The prev/next targets of a built page, as files (None where the page has no such link)."""
    text = page_html.read_text()
    links = {}
    for cls in ("left-prev", "right-next"):
        m = re.search(rf'<a class="{cls}"\s+href="([^"]+)"', text)
        links[cls] = (page_html.parent / unquote(m.group(1).split("#")[0])).resolve() if m else None
    return links


# --- without a browser -------------------------------------------------------------------------

def test_landing_page_says_plainly_when_there_is_no_claims_table(tmp_path):
    titles = {stem: stem for stem in NOTEBOOK_STEMS}
    teaches = book.readme_teaches()
    without = book.landing_page(titles, teaches, None, "9.9.9")
    assert "No claims table has been generated yet" in without and "{include}" not in without
    claims = tmp_path / "claims_cpu.md"
    claims.write_text("| claim | verdict |\n|---|---|\n| x | holds |\n")
    with_table = book.landing_page(titles, teaches, claims, "9.9.9")
    assert "```{include} _includes/claims_cpu.md" in with_table and "No claims table" not in with_table


def test_readme_table_covers_every_notebook():
    assert set(NOTEBOOK_STEMS) <= set(book.readme_teaches())


def test_every_figure_has_a_sidecar_and_a_cell_that_saves_it():
    import nbformat

    records = book.figure_records()
    assert sorted(r["png"].name for r in records) == FIGURE_PNGS
    for rec in records:
        nb = nbformat.read(REPO / "notebooks" / f"{notebook_now(rec['meta']['notebook'])}.ipynb", as_version=4)
        assert book.figure_cell_index(nb, rec["name"]) is not None, rec["name"]
    bench = next(r for r in records if r["name"] == "10_benchmarks_bars_fmnist")
    assert "10_benchmarks_cpu.csv" in [p.name for p in bench["data"]]  # named in its caption


def test_bibtex_of_a_reference_has_its_facts():
    ref = {"type": "conference-paper", "title": "A Title About Things", "year": 2022,
           "authors": [{"family-names": "Qu", "given-names": "Zhe"}, {"family-names": "Li", "given-names": "X"}],
           "conference": {"name": "ICML"}, "identifiers": [{"type": "other", "value": "arXiv:2206.02618"}]}
    entry = book.bibtex(ref)
    assert entry.startswith("@inproceedings{qu2022title,")
    assert "author        = {Qu, Zhe and Li, X}" in entry and "booktitle     = {ICML}" in entry
    assert "eprint        = {2206.02618}" in entry


# --- the built site ------------------------------------------------------------------------------

@needs_mathjax
def test_built_site_is_complete_and_offline(site):
    for stem in NOTEBOOK_STEMS:
        assert (site / "notebooks" / f"{stem}.html").exists(), stem
    for page in ("notation.html", "gallery.html", "citation.html", "api/fedlab.html", "api/data.html",
                 "api/analysis.html", "api/algorithms.html"):
        assert (site / page).exists(), page
    assert book.remote_assets(site) == []
    for old, new in RENAMED_NOTEBOOKS.items():  # a renamed notebook's old address sends the reader on
        moved = (site / "notebooks" / f"{old}.html").read_text()
        assert f'url={new}.html"' in moved and f'href="{new}.html"' in moved, old
    registry = (site / "api" / "algorithms.html").read_text()
    import fedlab

    for name in fedlab.ALGORITHMS:
        assert f'id="{name.replace("_", "-")}"' in registry, name  # Sphinx ids use '-' for '_'
    assert "‖g‖" in registry  # FedSAM's update rule, verbatim from its docstring


@needs_mathjax
def test_api_reference_documents_every_public_name(site):
    import inspect

    import fedlab
    import fedlab.analysis
    import fedlab.data

    ids = set()
    for page in (site / "api").glob("*.html"):
        ids |= set(re.findall(r'id="([^"]+)"', page.read_text()))
    for module in (fedlab, fedlab.data, fedlab.analysis):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue
            # the root re-exports some of fedlab.data's names; they are documented there, once
            homes = [f"{module.__name__}.{name}", f"fedlab.data.{name}"]
            assert any(h in ids for h in homes), f"{module.__name__}.{name} is not in the API reference"


@needs_mathjax
def test_prev_next_chain_visits_every_notebook_in_order(site):
    page, seen = (site / "index.html").resolve(), []
    while page is not None:
        assert page.exists(), f"navigation points to a file that was not built: {page}"
        seen.append(page)
        nxt = _nav(page)["right-next"]
        if nxt is not None:
            assert _nav(nxt)["left-prev"] == page, f"{nxt.name}: 'previous' does not lead back"
        page = nxt
        assert len(seen) < 200
    order = [p.stem for p in seen if p.parent.name == "notebooks"]
    assert order == NOTEBOOK_STEMS
    assert [p.name for p in seen[len(NOTEBOOK_STEMS) + 1:len(NOTEBOOK_STEMS) + 3]] == ["notation.html", "gallery.html"]


@needs_chromium
@needs_mathjax
def test_landing_page_in_chromium(site):
    with chromium_page() as page:
        page.goto(_file_url(site / "index.html"), wait_until="load")
        assert page.title().startswith("fedlab")
        rows = page.locator("section#the-notebooks table tbody tr")
        assert rows.count() == len(NOTEBOOK_STEMS)
        for i, stem in enumerate(NOTEBOOK_STEMS):
            href = rows.nth(i).locator("a").first.get_attribute("href")
            assert href == f"notebooks/{stem}.html"
        claims = page.locator("section#claims-table")
        if CLAIMS.exists():
            table = claims.locator("table")
            lines = CLAIMS.read_text().splitlines()
            tables = sum(1 for line in lines if line.startswith("|---"))  # claims, controls, sanity, findings
            assert table.count() == tables >= 1, "figures/claims_cpu.md exists but the landing page shows no table"
            body_rows = claims.locator("table tbody tr").count()
            assert body_rows == sum(1 for line in lines if line.startswith("|")) - 2 * tables
        else:
            assert "No claims table has been generated yet" in claims.inner_text()
            assert claims.locator("table").count() == 0
        assert page.evaluate(BROKEN_IMAGES_JS) == []
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000


@needs_chromium
@needs_mathjax
def test_notebook_page_in_chromium_renders_outputs_and_math(site):
    target = site / "notebooks" / "02_flatness_incompatibility.html"
    with chromium_page() as page:
        page.goto(_file_url(target), wait_until="load")
        assert "Flatness incompatibility" in page.locator("h1").first.inner_text()
        page.wait_for_function("Array.from(document.images).every(i => i.complete)", timeout=window_ms(20))
        assert page.locator("img").count() >= 3  # the notebook's figures, from the stored outputs
        assert page.evaluate(BROKEN_IMAGES_JS) == []
        # MathJax, served from _static, typeset the formulas (no network: a CDN would have failed)
        page.wait_for_selector(".MathJax_CHTML", timeout=window_ms(20))
        assert page.locator(".MathJax_CHTML").count() > 5
        for cls, neighbour in (("left-prev", "01b_foundations.html"), ("right-next", "03_friendly_adversary.html")):
            link = page.locator(f"a.{cls}")
            assert link.count() == 1 and link.get_attribute("href") == neighbour
            assert (target.parent / neighbour).exists()
        assert page.locator("a.right-next").get_attribute("href") == "03_friendly_adversary.html"


@needs_chromium
@needs_mathjax
def test_foundations_solutions_are_hidden_until_opened_and_notation_is_linked(site):
    """01b's exercise solutions are <details> blocks: closed on load, readable after a click on "Solution"."""
    target = site / "notebooks" / "01b_foundations.html"
    with chromium_page() as page:
        page.goto(_file_url(target), wait_until="load")
        assert "Foundations" in page.locator("h1").first.inner_text()
        solutions = page.locator("article details")
        assert solutions.count() >= 2
        first, text = solutions.first, solutions.first.locator("p").first
        assert first.get_attribute("open") is None and not text.is_visible()
        first.locator("summary").click()
        assert first.get_attribute("open") is not None and text.is_visible()
        assert page.locator("a[href='../notation.html']").count() >= 1  # the sidebar's Reference section
        page.goto(_file_url(site / "notation.html"), wait_until="load")
        page.wait_for_selector(".MathJax_CHTML", timeout=window_ms(20))
        notation = page.locator("article").inner_text()
        assert page.locator("article table").count() == 3
        assert "dirichlet_alpha" in notation and "lr_multiplier" in notation and "gamma_l" in notation


@needs_chromium
@needs_mathjax
def test_gallery_in_chromium_every_figure_loads_and_every_link_resolves(site):
    gallery = site / "gallery.html"
    with chromium_page() as page:
        page.goto(_file_url(gallery), wait_until="load")
        page.wait_for_function("Array.from(document.images).every(i => i.complete)", timeout=window_ms(30))
        widths = page.evaluate("() => Array.from(document.images).map(i => i.naturalWidth)")
        assert len(widths) == len(FIGURE_PNGS) and min(widths) > 0
        assert page.evaluate(BROKEN_IMAGES_JS) == []
        hrefs = page.evaluate("() => Array.from(document.querySelectorAll('article a[href]'))"
                              ".map(a => a.getAttribute('href'))")
    local = [h for h in hrefs if not re.match(r"^[a-z]+:", h)]
    cell_links = [h for h in local if "#fig-" in h]
    assert len(cell_links) == len(FIGURE_PNGS), "one link to the saving cell per figure"
    downloads = [h for h in local if "_downloads/" in h]
    assert sum(h.endswith(".json") for h in downloads) == len(FIGURE_PNGS)
    for href in local:
        path_part, _, fragment = href.partition("#")
        target = (gallery.parent / unquote(urlsplit(path_part).path)).resolve() if path_part else gallery
        assert target.exists(), f"gallery link to a missing file: {href}"
        if fragment:
            assert f'id="{fragment}"' in target.read_text(errors="replace"), f"missing anchor: {href}"
    sidecar = next(h for h in downloads if h.endswith("10_benchmarks_bars_fmnist.json"))
    meta = json.loads((gallery.parent / unquote(sidecar)).read_text())
    assert meta["figure"] == "10_benchmarks_bars_fmnist"
