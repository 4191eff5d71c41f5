"""No verdict without data, swept: every view and service that states a finding — the
attribution, an alert's likely-cause line, the runs list's mismatch cell, the compare's
divergence table and note, the hardware comparison — is read over runs that each lack one
input (no mismatch signal, a signal with no finite value, only a measure no alarm reads, no GPU
type). Where a run lacks what a view reads, the view states no finding about it and says what
is missing; where it has it, the view still states one (so the sweep can fail both ways)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from dashboard.pages import compare, compare_metrics, hardware, runs_data
from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.services.ingest import IngestService
from server.services.reads.attribution import cause_line
from server.services.reads.port import Reads
from server.storage.db import Database
from tests.factories import ingest_batch

EVERY = ReadScope.EVERY
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
STEPS = 30

RUNS: dict[str, tuple[dict[str, float], str | None]] = {
    # the references: healthy k3 on two GPU types, one setting apart from nothing
    "ref": ({"k3_kl": 1e-3, "k1_kl": 1e-3, "entropy": 1.0}, H100),
    "ref-a100": ({"k3_kl": 4e-3, "k1_kl": 4e-3, "entropy": 1.0}, A100),
    # each lacks one input
    "no-signal": ({"entropy": 1.0, "reward_mean": 0.5}, H100),
    "nan-signal": ({"k3_kl": math.nan, "entropy": 1.0}, H100),
    "measure-only": ({"prob_diff_max": 0.4, "entropy": 1.0}, H100),
    "no-gpu": ({"k3_kl": 2e-3, "k1_kl": 2e-3, "entropy": 1.0}, None),
}
LACKS_SIGNAL = {"no-signal", "measure-only"}
LACKS_VALUES = LACKS_SIGNAL | {"nan-signal"}


@dataclass(frozen=True)
class Said:
    """What a view said of a run: whether it is a finding, and its words."""

    finding: bool
    text: str


def attribution(reads: Reads, run: str) -> Said:
    found = reads.attribution.attribution(EVERY, run, gpu=False)
    scored = any(h.score > 0 for h in found.hypotheses)
    return Said(found.missing is None or scored, found.missing or found.top.title)


def notification(reads: Reads, run: str) -> Said:
    line = cause_line(reads.attribution.attribution(EVERY, run, gpu=False))
    return Said(line.startswith("Likely cause"), line)


def runs_list(reads: Reads, run: str) -> Said:
    page = reads.runs.runs_page(EVERY, limit=50)
    (summary,) = [s for s in page.runs if s.id == run]
    cell = runs_data.row(summary)["mismatch"]
    tip = runs_data.tooltips([summary])[0]["mismatch"]["value"]
    return Said(cell != runs_data.NO_SIGNAL, f"{cell} — {tip}")


def compared(reads: Reads, run: str) -> Said:
    """The compare as the page opens on it: `run` against the reference."""
    chosen = ["ref", run]
    logged = compare_metrics.logged(reads, EVERY, chosen)
    _, metric = compare_metrics.menu(logged, None)
    _, rows, _, note = compare.drawn(
        reads, EVERY, chosen, "ref", metric, "overlay", 3.0, 5, "step", None, None
    )
    (row,) = [r for r in rows if r["run"].startswith(run)]
    words = " ".join(n if isinstance(n, str) else str(n.children) for n in note)
    said = str(row["step"])
    finding = not said.startswith(("no data", "not decidable"))
    return Said(finding, f"[{metric}] {said} — {words}")


def by_gpu(reads: Reads, run: str) -> Said:
    """The hardware view of `run` beside the references on two GPU types."""
    selection = hardware.Selection(["ref", "ref-a100", run], None, None, None)
    out = hardware.compared(reads, EVERY, selection, None)
    note, advice, pairs, boxes = out[0], out[1], out[2], out[3]
    mine = [p.children for p in pairs if run in str(p.children)]
    # only the note's sentences on this run count as saying what it lacks
    note = ". ".join(s for s in str(note).split(". ") if "Left out" not in s or run in s)
    names = [str(t.name) for t in boxes.data] if boxes else []
    text = " ".join([str(note), str(advice), *map(str, mine), *names])
    return Said(bool(mine), text)


VIEWS: dict[str, tuple[Callable[[Reads, str], Said], set[str], tuple[str, ...]]] = {
    # view: (how to read it, the runs lacking its input, words that say what is missing)
    "attribution": (attribution, LACKS_VALUES, ("nothing to read",)),
    "notification": (notification, LACKS_VALUES, ("No likely cause", "nothing to read")),
    "runs list": (runs_list, LACKS_SIGNAL, ("no signal", "--map")),
    "compare": (compared, LACKS_SIGNAL, ("no data",)),
    "hardware": (by_gpu, {"no-gpu"} | LACKS_VALUES, ("Left out, with",)),
}


def _ingest(db: Database) -> None:
    ingest = IngestService(db)
    for run, (metrics, gpu) in RUNS.items():
        records = [
            {
                "run_id": run,
                "step": step,
                "source": "trainer",
                "actor": "trainer-0",
                "gpu": gpu,
                "time": 1.7e9 + step,
                "metrics": {k: v * (1 + 0.05 * math.sin(step)) for k, v in metrics.items()},
            }
            for step in range(STEPS)
        ]
        batch = {"run": {"id": run, "name": run, "project": "sweep"}, "records": records}
        ingest.ingest(ingest_batch(batch), OPEN)
    ingest.close()


@pytest.fixture
def reads(migrated_db: Database) -> Reads:
    _ingest(migrated_db)
    return Reads.over(migrated_db)


def test_no_view_states_a_finding_about_an_input_a_run_lacks(reads: Reads) -> None:
    wrong: list[str] = []
    for view, (read, lacking, words) in VIEWS.items():
        for run in RUNS:
            if run.startswith("ref"):
                continue
            said = read(reads, run)
            if run in lacking and said.finding:
                wrong.append(f"{view} states a finding about {run}: {said.text}")
            elif run in lacking and not all(w in said.text for w in words):
                wrong.append(f"{view} does not say what {run} lacks ({words}): {said.text}")
            elif run not in lacking and view != "hardware" and not said.finding:
                wrong.append(f"{view} states nothing about {run}, which has its input: {said}")
    assert not wrong, "\n".join(wrong)
