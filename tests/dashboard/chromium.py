"""Where the real headless Chromium lives and how it is started: the Debian package, because
browser downloads by test tools fail here. Shared by the dashboard fixtures, the security tier
and the demo test.

One browser per test process (per xdist worker) at a time, started on first use and closed
when the module that started it ends (`close_shared`, called from tests/conftest.py: Playwright's
sync API keeps an event loop running on the main thread while it is open); the tests of a module
share it, a fresh context per test keeps them apart (cookies, storage, dialogs).
"""

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

_shared: dict[str, Any] = {}  # "playwright", "browser": this process's


def shared_browser() -> Any:
    """This process's browser; fails under CI when Chromium is missing (the set-up installs it)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("Chromium is not installed; the test set-up (make test) installs it")
        pytest.skip("Debian chromium not installed (make test installs it)")
    browser = _shared.get("browser")
    if browser is not None and browser.is_connected():
        return browser
    close_shared()
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
    except BaseException:
        playwright.stop()
        raise
    _shared.update(playwright=playwright, browser=browser)
    return browser


def close_shared() -> None:
    browser = _shared.pop("browser", None)
    playwright = _shared.pop("playwright", None)
    try:
        if browser is not None and browser.is_connected():
            browser.close()
    finally:
        if playwright is not None:
            playwright.stop()


@contextmanager
def launched() -> Iterator[Any]:
    """The running browser; the contexts (and pages) opened meanwhile are closed after."""
    browser = shared_browser()
    before = set(browser.contexts)
    try:
        yield browser
    finally:
        for context in browser.contexts:
            if context not in before:
                context.close()
