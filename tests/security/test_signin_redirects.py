"""After signing in, a real Chromium lands on this server whatever `next=` says: the tricks a
browser forgives in a URL (tabs, line breaks, spaces, backslashes) never take a person from
the sign-in page, the identity provider's round trip or the token form to another host."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import pytest

from tests.dashboard.chromium import launched
from tests.security.conftest import PASSWORD, Deployment

pytestmark = [pytest.mark.security, pytest.mark.browser]

WAYS_OUT = [
    "/\t/evil.example/x",
    "/\n/evil.example/x",
    "/\r/evil.example/x",
    "/ /evil.example/x",
    " //evil.example/x",
    "/\\evil.example/x",
    "/\\\\evil.example/x",
    "\\/evil.example/x",
]
LANDED_S = 2.0


def _hosts(urls: list[str]) -> set[str]:
    return {urlsplit(u).netloc for u in urls if urlsplit(u).scheme in ("http", "https")}


@pytest.mark.parametrize("target", WAYS_OUT, ids=repr)
def test_signing_in_through_the_provider_never_leaves_the_server(
    deployment: Deployment, target: str
) -> None:
    url, provider = deployment.server.url, deployment.provider
    assert provider is not None
    with launched() as browser:
        context = browser.new_context()
        page = context.new_page()
        asked: list[str] = []
        page.on("request", lambda request: asked.append(request.url))
        page.goto(f"{url}/login/oidc?next={quote(target, safe='')}")
        page.wait_for_selector("#username")
        page.fill("#username", "alice")
        page.fill("#password", PASSWORD)
        page.click("#provider-submit")
        page.wait_for_timeout(LANDED_S * 1000)
        assert _hosts(asked) <= {urlsplit(url).netloc, urlsplit(provider.issuer).netloc}
        assert page.url.startswith(url + "/"), page.url
        context.close()


@pytest.mark.parametrize("target", WAYS_OUT, ids=repr)
def test_the_sign_in_pages_links_and_forms_never_leave_the_server(
    deployment: Deployment, target: str
) -> None:
    """The single-sign-on link of /login, then the token form: both carry `next` on."""
    url, provider = deployment.server.url, deployment.provider
    assert provider is not None
    with launched() as browser:
        context = browser.new_context()
        page = context.new_page()
        asked: list[str] = []
        page.on("request", lambda request: asked.append(request.url))
        page.goto(f"{url}/login?next={quote(target, safe='')}")
        page.click("#sso")
        page.wait_for_selector("#username")
        page.fill("#username", "alice")
        page.fill("#password", PASSWORD)
        page.click("#provider-submit")
        page.wait_for_timeout(LANDED_S * 1000)
        assert page.url.startswith(url + "/"), page.url
        page.goto(f"{url}/login?next={quote(target, safe='')}")
        page.fill("input[name=token]", deployment.tokens["read_alpha"])
        page.click("button[type=submit]")
        page.wait_for_timeout(LANDED_S * 1000)
        assert page.url.startswith(url + "/"), page.url
        assert _hosts(asked) <= {urlsplit(url).netloc, urlsplit(provider.issuer).netloc}
        context.close()
