"""CITATION.cff: the released version, its date, and a reference for every registered method."""
from __future__ import annotations

import datetime
import re
import tomllib
from pathlib import Path

import yaml

import fedlab

REPO = Path(__file__).resolve().parent.parent
CFF = yaml.safe_load((REPO / "CITATION.cff").read_text())


def test_version_is_the_package_version_and_the_date_is_a_date():
    assert CFF["version"] == fedlab.__version__
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    # pyproject states no version of its own: it reads fedlab/_version.py
    assert "version" not in pyproject["project"] and pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fedlab._version.__version__"}
    released = datetime.date.fromisoformat(str(CFF["date-released"]))
    assert released <= datetime.date.today()


def test_required_fields_and_no_placeholders():
    for key in ("cff-version", "message", "title", "authors", "license", "type"):
        assert CFF.get(key), key
    text = (REPO / "CITATION.cff").read_text()
    assert not re.search(r"TODO|example\.(com|org)|<[a-z-]+>|XXX", text)
    if "repository-code" in CFF:
        assert re.fullmatch(r"https://\S+", CFF["repository-code"])


def test_every_registered_method_has_its_paper_in_the_references():
    refs = CFF["references"]
    for ref in refs:
        assert ref["type"] in ("conference-paper", "article") and ref["title"] and ref["authors"]
        assert isinstance(ref["year"], int) and 2010 < ref["year"] <= datetime.date.today().year
        assert ref.get("conference", {}).get("name") or ref.get("journal"), ref["title"]
    cited = {name for ref in refs for name in re.findall(r"[a-z_]+", ref.get("notes", ""))}
    missing = [name for name in fedlab.ALGORITHMS if name not in cited]
    assert not missing, f"no reference names these methods in its notes: {missing}"


def test_the_citation_recipe_is_version_plus_commit():
    """No release is tagged in git, so a figure is cited by CITATION.cff's version and the commit in its
    sidecar: the message says so, and the book's citing page (included in the citation page) explains it."""
    assert "commit" in CFF["message"] and "sidecar" in CFF["message"]
    citing = (REPO / "notebooks" / "book" / "citing.md").read_text()
    assert "git_commit" in citing and "CITATION.cff" in citing and "CHANGELOG.md" in citing


def test_the_changelog_has_an_entry_for_this_version():
    """A figure's sidecar names the changelog entry of its version (lab.tools.figures.changelog_entry):
    setting a new version without writing its entry would leave every new figure pointing nowhere."""
    text = (REPO / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[?v?{re.escape(fedlab.__version__)}\]?(\s|$)", text, flags=re.M), \
        f"CHANGELOG.md has no '## {fedlab.__version__} ...' heading"


def test_cffconvert_validates_the_file_against_the_cff_schema():
    """The Citation File Format's own validator (what GitHub's "Cite this repository" and the BibTeX/APA
    conversions run first): duplicate authors, a wrong field or type fail here."""
    import shutil
    import subprocess
    import sys

    exe = shutil.which("cffconvert") or str(Path(sys.executable).with_name("cffconvert"))
    done = subprocess.run([exe, "--validate", "-i", str(REPO / "CITATION.cff")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "valid" in done.stdout


def test_cffconvert_refuses_a_reference_with_two_identical_authors(tmp_path):
    import shutil
    import subprocess
    import sys

    bad = dict(CFF)
    bad["references"] = [{**CFF["references"][0], "authors": [{"family-names": "Liu"}, {"family-names": "Liu"}]}]
    path = tmp_path / "CITATION.cff"
    path.write_text(yaml.safe_dump(bad, allow_unicode=True))
    exe = shutil.which("cffconvert") or str(Path(sys.executable).with_name("cffconvert"))
    done = subprocess.run([exe, "--validate", "-i", str(path)], capture_output=True, text=True)
    assert done.returncode != 0
