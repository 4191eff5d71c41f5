"""Real headless Chromium (the Debian package; browser downloads fail here) for the dashboard
tests: one browser per module (Playwright keeps an event loop on the main thread while it is
open, see tests/conftest.py), a fresh context per test with dialogs recorded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboard.chromium import launched


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launched() as browser:
        yield browser


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.dialogs = []  # type: ignore[attr-defined]
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    yield page
    context.close()
