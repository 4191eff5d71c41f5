"""The wire: what the collectors put on it and on disk, which the server reads.

A contract between the two distributions (`mismatch-collectors` in a training image,
`mismatch-monitor` on the server, released together): the server imports these names and nothing
else of the collectors' ingest, so the implementation behind them may change freely while these
stay. `tests/collectors/test_seams.py` keeps this list exactly what it is meant to be.

Over HTTP (`POST /api/v1/ingest`):
- `__version__`, `DISTRIBUTION`: the release, and the name a client gives itself;
- `WIRE_VERSION`: the ingest format, sent in the `WIRE_HEADER` header; `CLIENT_HEADER` names the
  client and its release; `CLIENT_HEADERS` is the pair every request of ours carries;
- `HttpTransport` posts one batch, `Answer` says what the server's answer means.

In a value's name: `dimensioned` spells one metric with a dimension (`k3_kl{env=gsm8k}`);
`ENVIRONMENT` is the per-environment dimension.

On disk (the spool that `mismatch spool replay` sends on from a node that is gone):
- `spool_file` tells a spool file's name from anything else in the directory;
- `read_batches` reads one file's batches (a dead letter reads as the batch it holds);
- `DEAD_LETTERS` is the subdirectory of batches the server refused for good.
"""

from __future__ import annotations

from collectors._dead import DIRECTORY as DEAD_LETTERS
from collectors._http import CLIENT_HEADERS, Answer, HttpTransport
from collectors._spool import read_batches, spool_file
from collectors._version import CLIENT_HEADER, DISTRIBUTION, WIRE_HEADER, WIRE_VERSION, __version__
from collectors._vocabulary import ENVIRONMENT, dimensioned

__all__ = [
    "CLIENT_HEADER",
    "CLIENT_HEADERS",
    "DEAD_LETTERS",
    "DISTRIBUTION",
    "ENVIRONMENT",
    "WIRE_HEADER",
    "WIRE_VERSION",
    "Answer",
    "HttpTransport",
    "__version__",
    "dimensioned",
    "read_batches",
    "spool_file",
]
