"""The landing page with a database of many runs, in real headless Chromium: the first page of
rows arrives without waiting for the trends, and no moment of the load looks like "no runs"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dashboard import ids
from dashboard.pages import runs_data
from server.domain.records import BatchWrite, Record, RunUpsert
from server.storage.db import Database
from server.storage.schema import migrate
from server.storage.writing import compaction
from server.storage.writing.ingest import write_batches

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUNS = 256
STEPS = 64
METRICS = ("k3_kl", "ratio_dev_1e4", "grad_norm", "rollout_clip_rate")

# Every change of the page, from its first paint: the status line and the rows shown.
RECORDER = f"""
window.__states = [];
new MutationObserver(() => {{
  const status = document.getElementById("{ids.RUNS_STATUS}");
  const rows = document.querySelectorAll("td[data-dash-column=name]").length;
  const text = status ? status.innerText : null;
  const waiting = Array.from(document.querySelectorAll("td[data-dash-column=trend]"))
    .filter(e => e.innerText === "{runs_data.LOADING}").length;
  const last = window.__states[window.__states.length - 1];
  if (!last || last.text !== text || last.rows !== rows || last.waiting !== waiting)
    window.__states.push({{text, rows, waiting}});
}}).observe(document, {{subtree: true, childList: true, characterData: true}});
"""


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database file of 256 runs, written through the storage layer's ingest path."""
    path = tmp_path_factory.mktemp("landing") / "many.duckdb"
    db = Database(str(path))
    migrate.upgrade(db)
    rng = np.random.default_rng(0)
    batches = []
    for i in range(RUNS):
        values = rng.lognormal(-7, 1, (STEPS, len(METRICS)))
        records = [
            Record(
                f"run-{i:03d}",
                s,
                "trainer",
                "trainer-0",
                1.7e9 + s + i,
                "NVIDIA H20",
                None,
                dict(zip(METRICS, map(float, values[s]), strict=True)),
            )
            for s in range(STEPS)
        ]
        batches.append(BatchWrite(RunUpsert(f"run-{i:03d}", project="p", labels={}), records))
    for start in range(0, RUNS, 16):
        with db.write() as conn:
            write_batches(conn, db, batches[start : start + 16])
    compaction.compact_all(db)
    db.dispose()
    return path


def test_the_landing_page_shows_rows_before_trends_and_never_looks_empty(
    server_factory: Any, many_runs: Path, page: Any
) -> None:
    server = server_factory(many_runs)
    page.add_init_script(RECORDER)
    page.goto(server.url + "/")
    page.wait_for_function(
        f"""(cells => cells.length === {runs_data.PAGE_SIZE} && cells.every(
              e => e.innerText.length > 1 && e.innerText !== "{runs_data.LOADING}"))(
              Array.from(document.querySelectorAll("td[data-dash-column=trend]")))""",
        timeout=60_000,
    )
    assert page.inner_text(f"#{ids.RUNS_STATUS}") == f"{RUNS} runs"
    states = page.evaluate("window.__states")
    assert states, "the recorder saw nothing"
    for state in states:
        assert state["text"] != "no runs yet", states
        if state["text"] is not None and state["rows"] == 0:  # no rows yet: it says why
            assert state["text"] in ("loading runs…", f"{RUNS} runs"), states
    full = {"text": f"{RUNS} runs", "rows": runs_data.PAGE_SIZE}
    rows_first = states.index({**full, "waiting": runs_data.PAGE_SIZE})  # rows, trends to come
    assert states[-1] == {**full, "waiting": 0} and rows_first < len(states) - 1

    page.fill(f"#{ids.RUNS_FILTER_TEXT}", "run-01")
    page.keyboard.press("Enter")
    page.wait_for_function(
        f"""document.getElementById("{ids.RUNS_STATUS}").innerText === "10 runs" """,
        timeout=60_000,
    )
    names = page.eval_on_selector_all(
        "td[data-dash-column=name]", "els => els.map(e => e.innerText)"
    )
    assert sorted(names) == [f"run-{i:03d}" for i in range(10, 20)]
    busy = page.eval_on_selector(f"#{ids.RUNS_BUSY}", "e => getComputedStyle(e).visibility")
    assert busy == "hidden"  # the load is over
    assert all(s["text"] != "no runs yet" for s in page.evaluate("window.__states"))
