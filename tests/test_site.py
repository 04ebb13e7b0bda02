"""The documentation site as ``make docs`` builds it, opened from the file system
(``file://``, no server) in a headless Chromium (tests/browser.py): every link of every
page names a file (not a folder, which a browser shows as a listing), the navigation
lands on pages, the search finds a known word, and nothing is fetched from the network.

``make docs`` runs this module on the site it just built (``GUIDEDBP_SITE=build/site``),
so CI runs it after ``make test-all``. Elsewhere the module builds the site itself into a
temporary folder, as ``make docs`` does, where the docs extra (MkDocs) is installed, and
is skipped where it is not (``make install`` leaves it out).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.helpers import REPO

from .browser import browser_fixture, page_fixture  # noqa: F401 (fixtures)

#: Set by ``make docs``: the site it built.
SITE_VARIABLE = "GUIDEDBP_SITE"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    built = os.environ.get(SITE_VARIABLE)
    if built:
        assert (Path(built) / "index.html").is_file(), f"{SITE_VARIABLE}={built}: no index.html"
        return Path(built).resolve()
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.skip("the docs extra (MkDocs) is not installed: make docs installs it and runs "
                    "these tests on the site it builds")
    folder = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                           str(folder)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def _local_links(page: Path) -> list[str]:
    """The href and src values of a built page that name a file of the site."""
    found = re.findall(r'\b(?:href|src)="([^"]*)"', page.read_text(encoding="utf-8"))
    return [url for url in found
            if url and not re.match(r"[a-z][a-z0-9+.-]*:|#|//", url)]


def _target(page: Path, url: str) -> Path:
    return (page.parent / unquote(urlsplit(url).path)).resolve()


def test_every_link_of_every_page_names_a_file(site):
    """With directory URLs a link was ``methods/``: from file:// a folder listing. The
    404 page alone links from the site's root (``/...``), as a server shows it."""
    pages = [page for page in site.rglob("*.html") if page.name != "404.html"]
    assert len(pages) > 25
    broken = {f"{page.relative_to(site)}: {url}" for page in pages
              for url in _local_links(page) if urlsplit(url).path
              and not _target(page, url).is_file()}
    assert not broken, sorted(broken)[:20]
    assert (site / "getting-started.html").is_file() and (site / "reference" /
                                                           "index.html").is_file()


def _requests(page) -> list[str]:
    return [event["params"]["request"]["url"] for event in page.events(
        "Network.requestWillBeSent")]


def test_the_navigation_lands_on_pages_from_the_file_system(page, site):
    page.navigate((site / "index.html").as_uri())
    links = page.evaluate("[...document.querySelectorAll('a.md-tabs__link, a.md-nav__link')]"
                          ".map(a => a.href).filter(h => h.startsWith('file:'))")
    assert len(links) > 20
    folders = [link for link in links if not Path(unquote(urlsplit(link).path)).is_file()]
    assert not folders, folders
    since = len(page.browser.events)
    page.evaluate("document.querySelector('a.md-tabs__link[href=\"getting-started.html\"]')"
                  ".click()")
    page.browser.wait_event("Page.loadEventFired", page.session, since)
    assert page.evaluate("location.href") == (site / "getting-started.html").as_uri()
    assert page.evaluate("document.querySelector('article h1').textContent") \
        .startswith("Getting started")
    assert page.evaluate("document.querySelectorAll('.md-sidebar a.md-nav__link').length") > 3


def test_the_search_finds_a_word_from_the_file_system(page, site):
    page.navigate((site / "getting-started.html").as_uri())
    page.evaluate("document.querySelector('input.md-search__input').focus()")
    page.call("Input.insertText", {"text": "D-RISE"})
    results = page.wait_for(
        "[...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)",
        timeout=30)
    detectors = (site / "detectors.html").as_uri()
    assert any(result.startswith(detectors) for result in results), results[:5]
    assert "matching document" in page.evaluate(
        "document.querySelector('.md-search-result__meta').textContent")
    # everything from the site's own files: no font, script or shim from the network
    remote = [url for url in _requests(page) if not re.match(r"(file|data|blob|about):", url)]
    assert not remote, remote
    since = len(page.browser.events)
    page.evaluate("document.querySelector('.md-search-result__item a').click()")
    page.browser.wait_event("Page.loadEventFired", page.session, since)
    assert page.evaluate("location.pathname").endswith("/detectors.html")
