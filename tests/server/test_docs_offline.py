"""/docs works on a cluster without the internet: every script, style and icon of the API's
documentation comes from the server itself, and the page renders its operations in a real
Chromium whose every request beyond the server is refused."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from tests import web
from tests.conftest import ServerProcess
from tests.dashboard.chromium import launched


@pytest.mark.browser
def test_docs_render_their_operations_with_no_network_beyond_the_server(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory()
    own = urlsplit(server.url).netloc
    elsewhere: list[str] = []
    with launched() as browser:
        context = browser.new_context()

        def only_the_server(route: object) -> None:
            request = route.request  # type: ignore[attr-defined]
            if urlsplit(request.url).netloc == own:
                route.continue_()  # type: ignore[attr-defined]
            else:
                elsewhere.append(request.url)
                route.abort()  # type: ignore[attr-defined]

        context.route("**/*", only_the_server)
        page = context.new_page()
        page.goto(server.url + "/docs")
        page.wait_for_selector(".opblock", timeout=60_000)
        operations = page.locator(".opblock-summary-path").all_inner_texts()
        assert "/api/v1/ingest" in operations
        assert "/api/v1/runs" in operations
    assert elsewhere == []


def test_the_docs_page_names_no_other_host(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory()
    page = web.get(server.url + "/docs", timeout=30)
    assert page.status_code == 200
    assert "cdn.jsdelivr.net" not in page.text and "/docs/assets/swagger-ui-bundle.js" in page.text
    script = web.get(server.url + "/docs/assets/swagger-ui-bundle.js", timeout=30)
    assert script.status_code == 200 and len(script.content) > 100_000
    redoc = web.get(server.url + "/redoc", follow_redirects=False, timeout=30)
    assert redoc.status_code == 307 and redoc.headers["location"] == "/docs"
