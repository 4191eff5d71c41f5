"""Where a browser goes after signing in: the one decision every way of signing in (a token,
the identity provider, the auth proxy) takes, so that none of them sends a person elsewhere.

A target is a path of this server, or "/". Browsers forgive a lot in a URL before they resolve
it (WHATWG URL standard): they drop tabs and line breaks anywhere, trim C0 controls and spaces
at either end, and read a backslash as a slash. So `/\\t/evil.example` is `//evil.example` to a
browser, a host of its own. Rather than model each forgiveness, a target with any control
character, space or backslash is refused outright, and what is kept is percent-encoded, so
the value written into a Location header or an HTML attribute is plain ASCII that every
browser reads as the same same-origin path.
"""

from __future__ import annotations

from urllib.parse import quote

HOME = "/"
MAX_TARGET = 2048
_KEPT = "/?&=%:@!$'()*+,;-._~#[]"
"""Characters left as they are: the path's, query's and fragment's own punctuation. Anything
else (non-ASCII, quotes, angle brackets) is percent-encoded."""


def after_sign_in(target: str | None) -> str:
    """A same-origin path to go to after sign-in, percent-encoded; "/" for anything else
    (a URL, a scheme-relative `//host`, control characters, spaces, backslashes)."""
    if not target or len(target) > MAX_TARGET or not target.startswith("/"):
        return HOME
    if target.startswith("//") or any(_refused(c) for c in target):
        return HOME
    return quote(target, safe=_KEPT)


def _refused(char: str) -> bool:
    code = ord(char)
    return code <= 0x20 or code == 0x7F or char == "\\" or 0x80 <= code <= 0x9F
