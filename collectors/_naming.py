"""How one run's metric keys become our names: the user's metric map (collectors._metric_map),
then the framework's table (collectors._adapters), and what the run's config records of both."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from collectors._metric_map import CONFIG_KEY, apply


class Naming:
    """One run's naming. `update_config` merges keys into the run's config; `warn_once(key,
    message)` logs a warning the first time its key is seen."""

    def __init__(
        self,
        metric_map: Mapping[str, str],
        update_config: Callable[[Mapping[str, Any]], object],
        warn_once: Callable[[str, str], None],
    ) -> None:
        self.metric_map = dict(metric_map)
        self._update_config = update_config
        self._warn_once = warn_once
        self._framework: str | None = None  # the framework whose provenance the config holds

    def config(self) -> dict[str, Any]:
        """What the run's config records from the start: the map, when there is one."""
        return {CONFIG_KEY: dict(self.metric_map)} if self.metric_map else {}

    def __call__(self, framework: str | None, metrics: Mapping[str, Any]) -> Mapping[str, Any]:
        """One step's metrics under our names (never raises for a name or a value)."""
        adapt = None if framework is None else partial(self._from_framework, framework)
        if not self.metric_map:
            return metrics if adapt is None else adapt(metrics)[0]
        return apply(self.metric_map, metrics, adapt)

    def _from_framework(
        self, framework: str, metrics: Mapping[str, Any]
    ) -> tuple[Mapping[str, Any], Mapping[str, str]]:
        from collectors._adapters import installed_version, map_metrics, provenance

        try:
            mapped = map_metrics(framework, metrics)
        except ValueError as exc:
            self._warn_once(f"framework:{framework}", f"metrics logged unmapped: {exc}")
            return metrics, {}
        if mapped.framework != self._framework:
            self._framework = mapped.framework
            version = installed_version(mapped.framework)
            self._update_config(provenance(mapped.framework, version))
        return mapped.metrics, mapped.renames
