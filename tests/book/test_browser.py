"""The rendered book in a real browser: Debian's Chromium, driven by Playwright.

The freshly built book is served on localhost and every page of the table of contents is
visited once, with every request that leaves localhost refused (the book must work on an
offline classroom network). The visit records what a reader would run into: console
errors, requests that failed, images that did not load, math left untypeset, broken
links. Each test below asserts one of those, for the English book and for its Chinese
edition, served under ``zh/``. A full-page screenshot of every page is saved in
``_build/screenshots/`` (look at them; CI keeps them as artifacts).
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from playwright.sync_api import sync_playwright

from browser import CHROMIUM, CHROMIUM_ARGS
from course import ROOT
from layout import chapters, pages

pytestmark = [pytest.mark.book, pytest.mark.browser]

SCREENSHOTS = ROOT / "_build" / "screenshots"
#: The Chinese edition's pages: the English book's, under zh/, but for the instructors' (English only).
CHINESE = [f"zh/{page}" for page in pages() if not page.startswith("book/instructors/")]
#: The Chinese edition's pages of its own, with no English counterpart (the checks' message phrases).
CHINESE_ONLY = ["zh/book/messages"]
TIMEOUT_MS = 30_000

# In the page: math elements that MathJax did not typeset, MathJax's own error marks, and
# TeX delimiters left in the text outside code.
MATH_REPORT_JS = """async () => {
    const hasMathJax = window.MathJax !== undefined && window.MathJax.startup !== undefined;
    if (hasMathJax) { await window.MathJax.startup.promise; }
    const math = Array.from(document.querySelectorAll('.math'));
    const untypeset = math.filter(el => !el.querySelector('mjx-container')).map(el => el.textContent.slice(0, 80));
    const walker = document.createTreeWalker(document.querySelector('main') || document.body, NodeFilter.SHOW_TEXT);
    const raw = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (node.parentElement.closest('pre, code, script, style, mjx-container, .math')) continue;
        if (/\\$\\$|\\\\\\(|\\\\\\[/.test(node.textContent)) raw.push(node.textContent.trim().slice(0, 80));
    }
    return {hasMathJax, count: math.length, typeset: document.querySelectorAll('mjx-container').length,
            untypeset, raw, errors: document.querySelectorAll('mjx-merror').length};
}"""

BROKEN_IMAGES_JS = """() => Array.from(document.images)
    .filter(img => !img.complete || img.naturalWidth === 0).map(img => img.getAttribute('src'))"""


@dataclass
class Visit:
    """What one page did in the browser."""

    page: str
    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)
    images: int = 0
    broken_images: list[str] = field(default_factory=list)
    math: dict = field(default_factory=dict)
    links: set[str] = field(default_factory=set)
    screenshot: Path | None = None


@pytest.fixture(scope="module")
def site(built_book):
    """``http://127.0.0.1:<port>/``, serving the built book's HTML folder."""

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(QuietHandler, directory=str(built_book)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium")
    with sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def context(browser, site):
    """A browser context that refuses, and records, every request leaving localhost."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    context.external_requests = []

    def offline(route):
        if urlsplit(route.request.url).hostname == "127.0.0.1" or route.request.url.startswith("data:"):
            route.continue_()
        else:
            context.external_requests.append(route.request.url)
            route.abort("internetdisconnected")

    context.route("**/*", offline)
    yield context
    context.close()


@pytest.fixture(scope="module")
def visits(context, site) -> dict[str, Visit]:
    """Every page of both editions, visited once: ``{docname: Visit}`` (the Chinese ``zh/book/...``)."""
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)
    return {page: visit(context, site, page) for page in pages() + CHINESE + CHINESE_ONLY}


def visit(context, site: str, docname: str) -> Visit:
    """Load ``docname``'s page, let MathJax finish, record what happened, screenshot it."""
    record = Visit(docname)
    page = context.new_page()

    def on_console(message):
        if message.type == "error":
            record.console_errors.append(message.text)

    def on_response(response):
        if response.status >= 400:
            record.failed_requests.append(f"{response.status} {response.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: record.console_errors.append(str(error)))
    page.on("requestfailed", lambda request: record.failed_requests.append(request.url))
    page.on("response", on_response)
    before = len(context.external_requests)
    page.goto(f"{site}{docname}.html", wait_until="load")
    record.math = page.evaluate(MATH_REPORT_JS)
    record.images = page.evaluate("() => document.images.length")
    record.broken_images = page.evaluate(BROKEN_IMAGES_JS)
    record.links = set(page.evaluate("() => Array.from(document.querySelectorAll('a[href]'), a => a.href)"))
    record.screenshot = SCREENSHOTS / f"{docname.replace('/', '__')}.png"
    page.screenshot(path=str(record.screenshot), full_page=True)
    record.external_requests = context.external_requests[before:]
    page.close()
    return record


def test_no_page_logs_a_console_error_or_fails_a_request(visits):
    problems = {page: v.console_errors + v.failed_requests for page, v in visits.items()
                if v.console_errors or v.failed_requests}
    assert not problems, problems


def test_no_page_needs_the_internet(visits):
    reaching_out = {page: v.external_requests for page, v in visits.items() if v.external_requests}
    assert not reaching_out, f"pages request files from the internet: {reaching_out}"


def test_every_image_loads_and_every_chapter_has_figures(visits):
    broken = {page: v.broken_images for page, v in visits.items() if v.broken_images}
    assert not broken, broken
    for chapter in chapters():
        for edition in ("", "zh/"):
            assert visits[f"{edition}book/{chapter}"].images >= 3, f"{edition}{chapter} shows fewer than 3 figures"


def test_math_is_typeset_everywhere(visits):
    for page, v in visits.items():
        math = v.math
        assert not math["untypeset"], f"{page}: math left as TeX: {math['untypeset'][:3]}"
        assert not math["raw"], f"{page}: TeX delimiters in the text: {math['raw'][:3]}"
        assert math["errors"] == 0, f"{page}: {math['errors']} MathJax errors"
    for page in [f"{edition}book/{c}" for c in chapters() + ["notation"] for edition in ("", "zh/")]:
        assert visits[page].math["hasMathJax"] and visits[page].math["typeset"] > 0, f"{page}: no typeset math"


def test_no_internal_link_is_broken(visits, site, built_book):
    """Every same-site link leads to a file of the build, and its #anchor to an element."""
    broken = []
    for page, v in visits.items():
        for link in sorted(v.links):
            if not link.startswith(site):
                continue
            parts = urlsplit(link)
            target = built_book / unquote(parts.path).lstrip("/")
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page} -> {link}")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _anchors(target):
                broken.append(f"{page} -> {link} (no such anchor)")
    assert not broken, broken


@functools.cache
def _anchors(page: Path) -> frozenset[str]:
    """The ``id`` attributes of an HTML file: what a ``#fragment`` can point at."""
    return frozenset(re.findall(r'\bid="([^"]+)"', page.read_text()))


def search(context, site: str, query: str, screenshot: str) -> list[str]:
    """The addresses the book's search page lists for ``query`` (``site``: the book's root), screenshot saved."""
    page = context.new_page()
    page.goto(f"{site}search.html?q={query}")
    page.wait_for_selector("ul.search li", timeout=TIMEOUT_MS)
    results = page.eval_on_selector_all("ul.search li a", "links => links.map(a => a.getAttribute('href'))")
    page.screenshot(path=str(SCREENSHOTS / screenshot), full_page=True)
    page.close()
    return results


def test_search_finds_softmax(context, site):
    results = search(context, site, "softmax", "search_softmax.png")
    assert any("02_attention_scoring" in href for href in results), f"search results: {results}"
    assert any("03_masking" in href for href in results), f"search results: {results}"


def test_every_page_links_its_counterpart_in_the_other_edition(visits, site):
    for page in CHINESE:
        english = page.removeprefix("zh/")
        assert f"{site}zh/{english}.html" in visits[english].links, f"{english} does not link its Chinese page"
        assert f"{site}{english}.html" in visits[page].links, f"{page} does not link its English page"
    for page in CHINESE_ONLY:  # no English page to link
        assert f"{site}{page.removeprefix('zh/')}.html" not in visits[page].links, f"{page} links an English page"


def test_the_chinese_edition_speaks_chinese(context, site):
    """Its interface (the search box, the theme's buttons) is in Chinese, and its search finds Chinese words."""
    page = context.new_page()
    page.goto(f"{site}zh/book/03_masking.html")
    assert page.evaluate("() => document.documentElement.lang").startswith("zh")
    assert page.get_by_placeholder("在本书中搜索……").count() > 0, "the search box is not in Chinese"
    page.close()
    results = search(context, f"{site}zh/", "掩蔽", "zh_search.png")
    assert any("03_masking" in href for href in results), f"search results: {results}"


@pytest.mark.parametrize("edition", ["", "zh/"], ids=["en", "zh"])
@pytest.mark.parametrize("chapter", chapters())
def test_exercise_page_launches_colab_and_binder_and_downloads(context, site, chapter, edition):
    """The launch menu opens onto Colab and Binder links for this very notebook, and the
    download menu's .ipynb is the released student notebook (of each edition)."""
    path = f"{edition}exercises/{chapter}/{chapter}.ipynb"
    page = context.new_page()
    page.goto(f"{site}{edition}exercises/{chapter}/{chapter}.html")
    page.get_by_role("button", name="Launch interactive content").click()  # the theme has no Chinese for it
    for launcher in ("colab.research.google.com", "mybinder.org"):
        link = page.locator(f'a[href*="{launcher}"]')
        assert link.is_visible(), f"{chapter}: no visible {launcher} launch button"
        assert path in link.get_attribute("href"), f"{chapter}: {launcher} opens another file"
    page.get_by_role("button", name="Download this page" if not edition else "下载此页面").click()  # the theme's
    download = page.locator('a[href*="_sources/"][href$=".ipynb"]')
    assert download.is_visible(), f"{chapter}: no visible .ipynb download"
    response = page.request.get(download.evaluate("a => a.href"))
    page.screenshot(path=str(SCREENSHOTS / f"exercise_{edition.strip('/')}{chapter}_menus.png"))
    page.close()
    assert response.ok and response.body() == (ROOT / path).read_bytes()
