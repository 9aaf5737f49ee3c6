"""Headless Chromium (Debian's package, driven by Playwright) for the book and JupyterLab tests.

Playwright's own browser download is never used: ``playwright install`` needs the internet. The
flags keep Chromium from calling home (component updates, sync, QUIC probes) on a closed network.
"""
from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not Path(CHROMIUM).exists():
        return "Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (the 'test' extra pins it)"
    return None


needs_chromium = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


@contextlib.contextmanager
def chromium_page(width: int = 1280, height: int = 900) -> Iterator:
    """A fresh page in a headless Chromium; closed (with the browser) on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            yield page
        finally:
            browser.close()


BROKEN_IMAGES_JS = """() => Array.from(document.images)
    .filter(img => !(img.complete && img.naturalWidth > 0)).map(img => img.getAttribute('src'))"""
