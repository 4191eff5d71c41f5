"""The suite's one-off HTTP calls, without a new TLS context each.

`httpx.get(...)` builds a client for its one call, and the client a TLS context that reads the
system's CA bundle: about 16 ms of CPU, twenty times the cost of the call itself to a loopback
server. The suite makes thousands of such calls. These functions are httpx's own, given one
context built once; each call still has a client of its own, so no cookie, connection or
header carries over from one call to the next.
"""

from __future__ import annotations

import ssl
from functools import partial

import httpx

TLS = ssl.create_default_context()
"""What httpx would build for each call (certificate checks on), built once."""

request = partial(httpx.request, verify=TLS)
get = partial(httpx.get, verify=TLS)
post = partial(httpx.post, verify=TLS)
put = partial(httpx.put, verify=TLS)
patch = partial(httpx.patch, verify=TLS)
delete = partial(httpx.delete, verify=TLS)
