"""The runs list's filters on what a run is and did, beyond its project, labels, tags and name:
its status, the GPU types it ran on, values of its config, and when it was last active. One
semantics for the API, the read client and storage, each refused in the words of its field.

    status   live, idle, finished, failed; several, comma-separated, match any of them
    gpu      a substring of a GPU type one of its actors reported, any case ("H100")
    config   a JSON object; a run matches when its config holds every key with that value:
             strings and booleans exactly, numbers by value (1 equals 1.0), null a key set to
             null. Keys are the config's top-level ones; objects and lists are not compared.
    since    its last activity (its last batch, else its creation) at or after, Unix seconds
    until    its last activity at or before, Unix seconds
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import get_args

from server.domain.names import RunStatus, storable

STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
MAX_CONFIG_KEYS = 16
MAX_KEY = 200

Scalar = str | int | float | bool | None


class InvalidRunFilter(ValueError):
    """A filter's text that means nothing: `field` names it, the message says what it takes."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class ConfigMatch:
    """A config key and the value it must hold."""

    key: str
    value: Scalar


@dataclass(frozen=True, slots=True)
class RunConditions:
    """The filters of this module, parsed; an empty one matches every run."""

    statuses: tuple[RunStatus, ...] = ()
    gpu: str | None = None
    config: tuple[ConfigMatch, ...] = ()
    since: float | None = None
    until: float | None = None

    @classmethod
    def parse(
        cls,
        *,
        status: str | None = None,
        gpu: str | None = None,
        config: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> RunConditions:
        """Conditions from the texts a client sent; InvalidRunFilter names the first bad one."""
        for name, when in (("since", since), ("until", until)):
            if when is not None and not (math.isfinite(when) and when >= 0):
                raise InvalidRunFilter(name, "Unix seconds, 0 or more")
        if since is not None and until is not None and since > until:
            raise InvalidRunFilter("since", f"{since} is after until ({until})")
        if gpu is not None and (not gpu.strip() or not storable(gpu)):
            raise InvalidRunFilter("gpu", "a part of a GPU type's name, e.g. H100")
        return cls(
            statuses=parse_statuses(status),
            gpu=gpu.strip() if gpu is not None else None,
            config=parse_config(config),
            since=since,
            until=until,
        )


def parse_statuses(text: str | None) -> tuple[RunStatus, ...]:
    """`live,idle`-style text as statuses (none: any status)."""
    if text is None:
        return ()
    found: list[RunStatus] = []
    for item in (i.strip() for i in text.split(",")):
        status = next((s for s in STATUSES if s == item), None)
        if status is None:
            raise InvalidRunFilter(
                "status", f"{item!r} is not one of {', '.join(STATUSES)} (comma-separated)"
            )
        if status not in found:
            found.append(status)
    return tuple(found)


def parse_config(text: str | None) -> tuple[ConfigMatch, ...]:
    """A JSON object's keys and scalar values as matches (none: no condition on the config)."""
    if text is None:
        return ()
    try:
        document = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise InvalidRunFilter(
            "config", f'a JSON object such as {{"vllm_version": "0.32.0"}} ({exc})'
        ) from None
    if not isinstance(document, dict) or not document:
        raise InvalidRunFilter("config", 'a JSON object with at least one key: {"key": value}')
    if len(document) > MAX_CONFIG_KEYS:
        raise InvalidRunFilter("config", f"at most {MAX_CONFIG_KEYS} keys")
    matches = []
    for key, value in document.items():
        if not 0 < len(key) <= MAX_KEY or not storable(key):
            raise InvalidRunFilter("config", f"a key is 1-{MAX_KEY} characters of text")
        if isinstance(value, (dict, list)):
            raise InvalidRunFilter(
                "config",
                f"{key!r}: a string, number, boolean or null (objects and lists are not compared)",
            )
        if isinstance(value, str) and not storable(value):
            raise InvalidRunFilter("config", f"{key!r}: text without NUL or lone surrogates")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not _finite(value):
            raise InvalidRunFilter("config", f"{key!r}: a finite number within float range")
        matches.append(ConfigMatch(key, value))
    return tuple(matches)


def _finite(number: float) -> bool:
    try:
        return math.isfinite(float(number))
    except OverflowError:  # an integer beyond any float
        return False


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is no value a config is filtered on; give a finite number")
