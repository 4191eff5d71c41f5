"""Hugging Face `Trainer` state files (`trainer_state.json`) → `SourceRun`s.

Every `transformers.Trainer` — and so TRL's GRPO, PPO and DPO trainers — writes
`trainer_state.json` into each checkpoint directory (`output_dir/checkpoint-<step>/`) and, at
the end, into `output_dir` (transformers: trainer_callback.py, `TrainerState.save_to_json`). Its
`log_history` is a list of the dicts the trainer logged, each with the `step` (`global_step`) it
was logged at, `epoch`, and the logged values (`loss`, `grad_norm`, `learning_rate`, and TRL's
`sampling/sampling_logp_difference/mean`, `sampling/importance_sampling_ratio/mean`, …, without
the `train/` prefix the W&B callback adds). Training and evaluation logs of one step are separate
entries: they are merged, a later value of a name replacing an earlier one. The last entry sums
up the whole training (`train_runtime`, `train_loss`, …): those are skipped, as are values that
are not numbers. The state's own settings (`max_steps`, `logging_steps`, `train_batch_size`, …)
become the run's config.

A run is its output directory: a path to a checkpoint's state names the run by the directory
above it, so importing a later checkpoint of the same training resumes the same run. Given a
directory, the reader takes its `trainer_state.json`, else the one of its latest checkpoint.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from server.importers.core import MAX_METRICS, SourceError, SourceRun, text_path

FILE = "trainer_state.json"
SUMMARY_KEYS = frozenset(
    {
        "train_runtime",
        "train_samples_per_second",
        "train_steps_per_second",
        "train_loss",
        "total_flos",
    }
)
BOOKKEEPING = frozenset({"step", "epoch"})
SETTINGS = (
    "max_steps",
    "num_train_epochs",
    "logging_steps",
    "eval_steps",
    "save_steps",
    "train_batch_size",
    "global_step",
)
_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


def read(path: str | Path) -> SourceRun:
    """One training run's state file (or its output or checkpoint directory), parsed whole."""
    given = Path(text_path(path))
    file = _state_file(given)
    run_dir = file.parent.resolve()
    if _CHECKPOINT.match(run_dir.name):
        run_dir = run_dir.parent
    data = _load(file)
    history = data.get("log_history")
    if not isinstance(history, list):
        raise SourceError(str(file), "has no 'log_history' list: not a Trainer state file")
    run = SourceRun(
        kind="trainer_state", key=str(run_dir), source=str(file.resolve()), name=run_dir.name
    )
    run.config = {"trainer_state": {k: data[k] for k in SETTINGS if _plain(data.get(k))}}
    for index, entry in enumerate(history):
        where = f"log_history[{index}]"
        if not isinstance(entry, dict):
            raise SourceError(str(file), f"corrupt: {where} is not an object")
        step = entry.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise SourceError(str(file), f"corrupt: {where} has no integer 'step'")
        for name, value in entry.items():
            if name in BOOKKEEPING:
                continue
            if name in SUMMARY_KEYS:
                run.skipped[name] = "the Trainer's end-of-training summary, not a step's value"
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                run.skipped.setdefault(name, f"not a number ({type(value).__name__})")
            else:
                run.add(step, name, float(value), None)
        if len(run.steps.get(step, ())) > MAX_METRICS:
            raise SourceError(
                str(file), f"step {step} logs over {MAX_METRICS} metrics, the most a step holds"
            )
    return run


def _state_file(given: Path) -> Path:
    if given.is_file():
        return given
    if not given.is_dir():
        raise SourceError(str(given), "no such file or directory")
    direct = given / FILE
    if direct.is_file():
        return direct
    checkpoints = [
        (int(m.group(1)), d)
        for d in given.iterdir()
        if (m := _CHECKPOINT.match(d.name)) and (d / FILE).is_file()
    ]
    if not checkpoints:
        raise SourceError(str(given), f"holds no {FILE} (nor a checkpoint-N directory with one)")
    return max(checkpoints)[1] / FILE


def _load(file: Path) -> dict[str, Any]:
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise SourceError(str(file), f"cannot be read ({exc.strerror})") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(str(file), f"not UTF-8 text at byte {exc.start}") from None
    try:
        loaded = json.loads(text)  # Python's json reads the NaN and Infinity the Trainer writes
    except ValueError as exc:
        raise SourceError(str(file), f"corrupt or truncated JSON ({exc})") from exc
    if not isinstance(loaded, dict):
        raise SourceError(str(file), "is not a JSON object: not a Trainer state file")
    return loaded


def _plain(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (int, str)) and not isinstance(value, bool)
