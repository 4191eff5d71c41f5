"""Where a browser goes after signing in: only ever a path of this server, however the target
is spelled, checked against the way browsers read a URL before they follow it."""

from __future__ import annotations

import html
import re
from urllib.parse import urljoin, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.api.gate import login_page
from server.api.redirects import HOME, after_sign_in

pytestmark = pytest.mark.security

SERVER = "http://monitor.lab.example:8080/"
C0_AND_SPACE = "".join(chr(c) for c in range(0x21))
TRICKS = [
    "/\t/evil.example/x",
    "/\n/evil.example/x",
    "/\r/evil.example/x",
    "/\r\n/evil.example/x",
    "/ /evil.example/x",
    " //evil.example/x",
    "/\\evil.example/x",
    "/\\/evil.example/x",
    "\\\\evil.example/x",
    "//evil.example/x",
    "///evil.example/x",
    "https://evil.example/x",
    "javascript:alert(1)",
    "/\x00/evil.example",
    "/\x0b/evil.example",
    "/\x7f/evil.example",
    "/\u0085/evil.example",
    "\t//evil.example",
    "",
]


def browser_reads(written: str) -> str:
    """The absolute URL a browser makes of `written` on a page of SERVER, as the WHATWG URL
    parser does: trim C0 controls and spaces at either end, drop every tab and line break,
    read backslashes as slashes (http is a special scheme), then resolve."""
    trimmed = written.strip(C0_AND_SPACE)
    cleaned = re.sub("[\t\n\r]", "", trimmed).replace("\\", "/")
    return urljoin(SERVER, cleaned)


def meta_refresh_target(page: str) -> str:
    """The URL a `<meta http-equiv="refresh">` sends the browser to, as it reads the page."""
    found = re.search(r'content="0;url=([^"]*)"', page)
    assert found is not None
    return html.unescape(found.group(1))


def stays_home(url: str) -> bool:
    parts = urlsplit(url)
    return (parts.scheme, parts.netloc) == ("http", "monitor.lab.example:8080")


@pytest.mark.parametrize("target", TRICKS)
def test_known_ways_out_go_home(target: str) -> None:
    assert after_sign_in(target) == HOME


@pytest.mark.parametrize(
    "target",
    ["/", "/run?run=grpo-v1&step_min=10&step_max=30", "/compare?runs=a,b#top", "/activity"],
)
def test_a_path_of_this_server_is_kept(target: str) -> None:
    assert after_sign_in(target) == target


def test_a_kept_path_is_percent_encoded() -> None:
    assert after_sign_in('/run?run=é"<x>') == "/run?run=%C3%A9%22%3Cx%3E"


PIECES = (
    ["/", "\\", "\t", "\n", "\r", " ", "\x00", "\x0c", "\x7f", "\u0085", "\u3000", "%"],
    ["%09", "%2F", "%5C", ":", "@", "?", "#", ".", "evil.example", "a", "é", "\u2215", "\uff0f"],
    ["http:", "javascript:", "&", '"', "<", "'"],
)
TARGET_CHARS = st.sampled_from([piece for pieces in PIECES for piece in pieces])


@given(st.lists(TARGET_CHARS, max_size=12).map("".join))
@settings(max_examples=2000, deadline=None)
def test_no_target_leaves_the_server_however_a_browser_reads_it(target: str) -> None:
    kept = after_sign_in(target)
    assert kept.isascii() and kept.isprintable() and " " not in kept and "\\" not in kept
    assert kept.startswith("/") and not kept.startswith("//")
    assert stays_home(browser_reads(kept)), (target, kept)


@given(st.lists(TARGET_CHARS, max_size=12).map("".join))
@settings(max_examples=500, deadline=None)
def test_the_target_written_into_a_page_stays_on_the_server(target: str) -> None:
    kept = after_sign_in(target)
    page = f'<meta http-equiv="refresh" content="0;url={html.escape(kept, quote=True)}">'
    assert stays_home(browser_reads(meta_refresh_target(page)))
    form = login_page(next_path=kept, sso=True)
    value = re.search(r'name="next" value="([^"]*)"', form)
    assert value is not None and html.unescape(value.group(1)) == kept


@given(st.text(max_size=40))
@settings(max_examples=1000, deadline=None)
def test_any_text_is_a_path_of_this_server_or_home(target: str) -> None:
    kept = after_sign_in(target)
    assert stays_home(browser_reads(kept))
    assert after_sign_in(kept) == kept  # written twice (stored, then sent): the same target
