"""Fixtures of the browser tests: the built book and a headless Chromium (see ``bookcheck``).

These tests read ``_build/html``: run them after ``make book`` (``make browser`` or ``make check`` does both).
``make test`` does not collect them (``norecursedirs`` in ``pyproject.toml``).
"""

from __future__ import annotations

import pytest

from .bookcheck import ROOT, BookBrowser, find_chromium

HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"


@pytest.fixture(scope="session")
def html_root():
    if not (HTML / "index.html").exists():
        pytest.fail(f"no built book at {HTML}: run 'make book' first ('make check' builds it, then runs these tests)")
    return HTML


@pytest.fixture(scope="session")
def browser():
    try:
        executable = find_chromium()
    except FileNotFoundError as err:
        pytest.fail(str(err))
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        book_browser = BookBrowser(playwright, executable)
        yield book_browser
        book_browser.close()
