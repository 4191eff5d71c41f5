"""Which framework (and which release of it) a run's values came from, for the run's config.

A run records `{"framework": {"name": ..., "version": ...}}` once, so that a value stored under
`clip_rate@verl` can be traced to the verl release whose formula it is. The version is that of
the framework's distribution in the process that logs, when it is installed there.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

# framework (as the tables name it) -> its distribution on the package index
DISTRIBUTIONS: dict[str, str] = {
    "verl": "verl",
    "trl": "trl",
    "nemo-rl": "nemo-rl",
    "openrlhf": "openrlhf",
    "slime": "slime",
    "ms-swift": "ms-swift",
    "skyrl": "skyrl",
    "areal": "areal",
    "roll": "roll",
    "prime-rl": "prime-rl",
    "rlinf": "rlinf",
}

CONFIG_KEY = "framework"


def installed_version(framework: str) -> str | None:
    """The installed version of the framework's distribution; None when it is not installed."""
    distribution = DISTRIBUTIONS.get(framework)
    if distribution is None:
        return None
    try:
        return metadata.version(distribution)
    except Exception:  # not installed, or broken metadata: provenance without a version
        return None


def provenance(framework: str, version: str | None) -> dict[str, Any]:
    """The run-config entry naming where the values came from (`CONFIG_KEY` holds it)."""
    return {CONFIG_KEY: {"name": framework, "version": version}}
