"""Sphinx configuration of the fedlab book (myst-nb + sphinx-book-theme), built OFFLINE.

`notebooks/book/build.py` stages the sources (this file, the notebooks, generated pages, the
figures, a local MathJax) into a build folder and runs sphinx-build there; nothing here fetches
anything from the network: notebooks are rendered from their stored outputs (never executed),
MathJax 2 is served from ``_static/mathjax`` (Debian's libjs-mathjax, copied by build.py) instead of
Sphinx's CDN default, and myst-nb's widget scripts (also on a CDN) are switched off.
"""
from __future__ import annotations

import fedlab  # build.py puts the repository first on PYTHONPATH: the API pages document this tree

project = "fedlab"
author = "The fedlab developers"
release = version = fedlab.__version__
copyright = "the fedlab developers (MIT licence)"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.mathjax"]
exclude_patterns = ["_build", "_includes", "**.ipynb_checkpoints", "jupyter_execute"]

# Notebooks are rendered as committed (or as `make book EXECUTE=1` executed them): never re-run here.
nb_execution_mode = "off"
nb_ipywidgets_js: dict = {}
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
myst_heading_slug_func = "github"
myst_update_mathjax = False

# MathJax 2.7 from the Debian package, copied into _static by build.py (Sphinx's default is a CDN).
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS_CHTML"
mathjax2_config = {"CommonHTML": {"linebreaks": {"automatic": True}}, "showMathMenu": False,
                   "messageStyle": "none"}

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": False}
# Type hints name classes re-exported in several packages (fedlab.Dataset is fedlab.data.Dataset):
# such a reference has several equal targets; Sphinx links the first and need not warn.
suppress_warnings = ["ref.python"]

html_theme = "sphinx_book_theme"
html_title = f"fedlab {release}"
html_static_path = ["_static"]
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "home_page_in_toc": True,
    "navigation_with_keys": False,
    "show_navbar_depth": 1,
}


def _docstring_verbatim(app, what, name, obj, options, lines: list[str]) -> None:
    """Show every docstring as the preformatted text it is written as.

    fedlab's docstrings are written for ``help()``: formulas laid out in monospace, ‖·‖ and |·| in
    the maths, indented update rules. Read as reStructuredText those are substitutions, block quotes
    and emphasis; shown verbatim they read as their author wrote them.
    """
    if not any(line.strip() for line in lines):
        return
    body = [f"   {line}" if line.strip() else "" for line in lines]
    lines[:] = ["::", "", *body, ""]


def setup(app):
    app.connect("autodoc-process-docstring", _docstring_verbatim)
