"""The one place the version lives.

Both distributions read `__version__` from here (`mismatch-collectors` through its own
pyproject, `mismatch-monitor` through the top-level one), so they are released together.
`WIRE_VERSION` is the version of the ingest format (`/api/v1`): the collectors send it in the
`X-Mismatch-Wire` header and the server refuses, naming both versions, a format it does not speak.
Format 2 adds the batch's `project`, sent with every batch (a run id may be used in several
projects); a format-2 server still takes format 1.
"""

from __future__ import annotations

__version__ = "0.1.0"
WIRE_VERSION = 2
CLIENT_HEADER = "X-Mismatch-Client"
WIRE_HEADER = "X-Mismatch-Wire"
DISTRIBUTION = "mismatch-collectors"
