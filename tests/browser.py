"""Debian's Chromium as the tests drive it (through Playwright): the book's pages, and the guide's screenshots."""

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# The flags that keep Chromium from calling home on a machine with no internet.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextmanager
def offline_page(path: Path, refused: list[str], width: int = 1280, height: int = 900):
    """A Chromium tab showing the file ``path``, loaded, with every request but ``file:`` and ``data:`` refused and
    its address added to ``refused`` (the caller asserts it stays empty)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": width, "height": height})
            context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(("file:", "data:"))
                          else (refused.append(route.request.url), route.abort("internetdisconnected")))
            tab = context.new_page()
            tab.goto(path.as_uri())
            tab.wait_for_load_state("load")
            yield tab
        finally:
            browser.close()
