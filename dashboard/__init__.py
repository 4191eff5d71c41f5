"""The Mismatch Monitor dashboard (Plotly Dash), served by `mismatch serve` at `/`.

It reads only through the server's read side, which the composition root hands to
`create_dash`; it never opens the database itself.
"""

from __future__ import annotations

from dashboard.app import create_dash

__all__ = ["create_dash"]
