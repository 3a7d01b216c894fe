"""Debian's Chromium as the tests drive it (through Playwright): the book's pages, and the guide's screenshots."""

import os
import shutil

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# The flags that keep Chromium from calling home on a machine with no internet.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
