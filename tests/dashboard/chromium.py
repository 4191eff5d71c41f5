"""Where the real headless Chromium lives and how it is started: the Debian package, because
browser downloads by test tools fail here. Shared by the dashboard fixtures and the demo test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


@contextmanager
def launched() -> Iterator[Any]:
    """A running browser; fails under CI when Chromium is missing (the set-up installs it)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("Chromium is not installed; the test set-up (make test) installs it")
        pytest.skip("Debian chromium not installed (make test installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()
