"""The lines under a run page's title that say how to read the run: where it stands (its id,
project, how and when it ended, GPUs), what the user mapped its metric names to, and the
sampler-only settings the server read in its config. Pure: text from the run's detail, None
where there is nothing to say."""

from __future__ import annotations

from collections.abc import Mapping

from dashboard.pages import run_data
from dashboard.pages.runs_data import status_cell
from server.domain.metrics import METRIC_MAP_KEY
from server.domain.reads.runs import JsonObject, RunDetail
from server.domain.sampler import SAMPLER_ONLY_LABEL
from server.figures.text import ROLLUPS_ONLY


def subtitle(detail: RunDetail) -> str:
    """Id, project, status (with its end), last step and GPUs, in one line."""
    last = "—" if detail.last_step is None else detail.last_step
    line = (
        f"{detail.id} · project {detail.project} · "
        f"{status_cell(detail.status, detail.ended_at)} · last step {last} · "
        f"GPUs: {', '.join(detail.gpus) or 'unknown'}"
    )
    return line + (f" · {ROLLUPS_ONLY}" if detail.raw_dropped else "")


def metric_map_line(config: JsonObject) -> str | None:
    """The line naming the user's metric map ("metrics mapped by the user: a → b"); None where
    the run's config records none."""
    mapping = config.get(METRIC_MAP_KEY)
    if not isinstance(mapping, dict) or not mapping:
        return None
    return "metrics mapped by the user: " + ", ".join(f"{k} → {v}" for k, v in mapping.items())


def sampler_only_line(labels: Mapping[str, str]) -> str | None:
    """The line naming the run's sampler-only settings, which the server read in its config;
    None where it records none."""
    settings = labels.get(SAMPLER_ONLY_LABEL)
    if not settings:
        return None
    return (
        f"sampler-only setting: {settings} — applied by the rollout's sampler and not by the "
        "trainer, a mismatch from the first step (alarms watch this run at tighter levels)"
    )


def notes(detail: RunDetail, last: int = 50) -> list[str]:
    """The run's last annotations and GPU changes as lines, in step order (unstepped first)."""
    return [
        f"step {'—' if n.step is None else n.step} · {n.kind} · {n.text}"
        for n in run_data.notes(detail.annotations, detail.gpu_segments)[-last:]
    ]
