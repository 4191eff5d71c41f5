"""Identifier vocabularies: what a run id, a project or a metric name may look like, and the
sources a record comes from. The API's schemas and the services validate against these."""

from __future__ import annotations

from typing import Literal

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$"
"""Run ids, annotation ids: chosen by clients, safe in URLs and file names."""

NAME_PATTERN = r"^[A-Za-z0-9_.:/@+-]{1,128}$"
"""Projects, actors, annotation kinds."""

DEFAULT_PROJECT = "default"

Source = Literal["trainer", "rollout"]
SOURCES: tuple[Source, ...] = ("trainer", "rollout")

Basis = Literal["rollout", "trainer"]
"""Which probability a bucket table is binned on: exp(lR) (rollout) or exp(lT) (trainer)."""

RunState = Literal["running", "finished", "failed"]
"""What a client says of its run. The API adds "live" and "idle" from the run's activity."""
RunStatus = Literal["live", "idle", "finished", "failed"]
ENDED: tuple[RunState, ...] = ("finished", "failed")
"""The states of a run that said it ended: never stalled; logging again makes it running."""

RunSort = Literal["activity", "created", "name", "k3", "alarms"]
RUN_SORTS: tuple[RunSort, ...] = ("activity", "created", "name", "k3", "alarms")

RunKind = Literal["training", "parity"]
"""What a run is: a training run, or a parity report (a fixed prompt set sampled by the engine
and recomputed by the trainer before any training; `mismatch parity`)."""
RUN_KINDS: tuple[RunKind, ...] = ("training", "parity")
DEFAULT_RUN_KIND: RunKind = "training"

ExemplarKind = Literal["top", "uniform"]

Resolution = Literal["buckets", "full"]
"""A series read: step buckets fitting `max_points` (spikes kept), or every stored step."""
"""Which tokens of a step an exemplar stands for: `top`, the largest |log-ratio| of the step;
`uniform`, a uniform sample of the step's tokens (an unbiased picture beside the worst ones)."""
EXEMPLAR_KINDS: tuple[ExemplarKind, ...] = ("top", "uniform")

MAX_EXEMPLARS_PER_RECORD = 1024
"""The most token exemplars one record may carry: what keeps per-token data bounded."""


def storable(text: str) -> bool:
    """Text both databases can store and compare: no NUL (PostgreSQL's text refuses it) and
    valid UTF-8 (a JSON or URL escape can spell a lone surrogate). What a client may send as a
    filter or a cursor is held to it before any query is made of it."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
