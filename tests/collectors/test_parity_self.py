"""The engine against itself, the pure part: the comparison of the same requests sent alone and
batched (against a reference written token by token with explicit loops and math.exp/log), the
batch sizes compared, the gate's tolerance — 0 for a batch-invariant engine — and what the
report, its wire metrics and the terminal carry. No engine here; tests/vllm runs the real one."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from collectors._parity import (
    DEFAULT_MAX_SELF_LOGP_DIFF,
    ParityReport,
    Phase,
    SelfBatch,
    evaluate,
)
from collectors._parity._engine import Batch
from collectors._parity._self import batch_sizes, compare, first_divergence
from server.cli.parity_output import explain, self_lines


def _log_softmax(x: np.ndarray) -> list[float]:
    shifted = x - x.max()
    return [float(v) for v in shifted - np.log(np.exp(shifted).sum())]


def _batch(tokens: list[list[int]], rows: list[list[list[float]]]) -> Batch:
    """Sequences with a whole distribution per position and the sampled token's logprob."""
    logprobs = [
        [row[t] for t, row in zip(seq, dist, strict=True)]
        for seq, dist in zip(tokens, rows, strict=True)
    ]
    dists = [[dict(enumerate(row)) for row in dist] for dist in rows]
    return Batch([[1, 2]] * len(tokens), tokens, logprobs, dists)


def _pair(seed: int = 0) -> tuple[Batch, Batch]:
    """Two sequences of 6 tokens over a vocabulary of 8; the second side's logits nudged, and
    its second sequence sampling another token at position 3."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2, (2, 6, 8))
    nudged = logits + rng.normal(0, 1e-3, logits.shape)
    ref_rows = [[_log_softmax(p) for p in seq] for seq in logits]
    got_rows = [[_log_softmax(p) for p in seq] for seq in nudged]
    ref_tokens = [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]]
    got_tokens = [[0, 1, 2, 3, 4, 5], [5, 4, 3, 7, 7, 7]]
    return _batch(ref_tokens, ref_rows), _batch(got_tokens, got_rows)


def test_compare_matches_a_token_by_token_reference_up_to_the_first_divergence() -> None:
    reference, batched = _pair()
    found = compare(reference, batched)
    diffs, kls, tvs = [], [], []
    for i, limit in ((0, 6), (1, 3)):  # sequence 1 parts at position 3
        for pos in range(limit):
            diffs.append(abs(reference.logprobs[i][pos] - batched.logprobs[i][pos]))
        for pos in range(min(limit + 1, 6)):  # the divergent position's context still agrees
            a = reference.distributions[i][pos]  # type: ignore[index]
            b = batched.distributions[i][pos]  # type: ignore[index]
            kls.append(sum(math.exp(b[t]) * (b[t] - a[t]) for t in range(8)))
            tvs.append(sum(abs(math.exp(b[t]) - math.exp(a[t])) for t in range(8)) / 2)
    assert found["tokens"] == len(diffs) == 9
    assert found["logp_diff_max"] == pytest.approx(max(diffs), rel=1e-12)
    assert found["logp_diff_mean"] == pytest.approx(sum(diffs) / 9, rel=1e-12)
    assert (found["sequences"], found["diverged"], found["first_divergence"]) == (2, 1, 3)
    assert found["full_kl_mean"] == pytest.approx(sum(kls) / len(kls), rel=1e-6)
    assert found["full_tv_max"] == pytest.approx(max(tvs), rel=1e-9)
    assert found["logp_diff_max"] > 0 and found["full_tv_max"] > 0


def test_the_reference_against_itself_reads_zero_and_no_divergence() -> None:
    reference, _ = _pair()
    found = compare(reference, reference)
    assert found["logp_diff_max"] == found["full_tv_max"] == found["full_kl_max"] == 0.0
    assert found["diverged"] == 0.0 and "first_divergence" not in found


def test_a_sequence_ending_early_diverges_at_its_end() -> None:
    assert first_divergence([1, 2, 3], [1, 2]) == 2
    assert first_divergence([1, 2], [1, 2]) is None
    assert first_divergence([1, 2], [3, 2]) == 0


def test_a_nan_logprob_makes_the_largest_difference_nan() -> None:
    reference = Batch([[1]], [[4, 5]], [[-1.0, -2.0]])
    broken = Batch([[1]], [[4, 5]], [[-1.0, math.nan]])
    assert math.isnan(compare(reference, broken)["logp_diff_max"])


def test_batch_sizes_leave_out_the_reference_and_stop_at_the_request_count() -> None:
    assert batch_sizes([1, 4, 16], 16) == (4, 16)
    assert batch_sizes([4, 16, 32], 8) == (4, 8)
    assert batch_sizes([16], 1) == ()
    with pytest.raises(ValueError, match="at least 1"):
        batch_sizes([0, 4], 16)


def report(max_diff: float, *, diverged: float = 0.0, invariant: bool = False) -> ParityReport:
    counts = {"tokens": 64.0, "sequences": 16.0}
    selves = (
        SelfBatch(1, 1, {"logp_diff_max": 0.0, **counts, "diverged": 0.0}),
        SelfBatch(4, 4, {"logp_diff_max": max_diff / 2, **counts, "diverged": 0.0}),
        SelfBatch(16, 16, {"logp_diff_max": max_diff, **counts, "diverged": diverged}),
    )
    phase = Phase(0, "plain sampling", {"k3_kl": 1e-12, "ratio_dev_1e4": 0.0, "tokens": 64.0})
    engine = {"name": "vllm", "batch_invariant": invariant, "logprobs_mode": "processed_logprobs"}
    parity = {"weight_update": "none", "self_batch_sizes": [1, 4, 16]}
    return ParityReport((phase,), engine, {"dtype": "float32"}, parity, selves)


def test_the_gate_trips_below_the_measured_difference_and_passes_above() -> None:
    measured = report(3.3e-6)
    below = evaluate(measured, max_self_logp_diff=1e-6)
    assert not below.passed
    assert [(x.phase, x.metric, x.value) for x in below.exceeded] == [
        ("batch of 4 against the same requests alone", "self_logp_diff_max", 1.65e-6),
        ("batch of 16 against the same requests alone", "self_logp_diff_max", 3.3e-6),
    ]
    assert evaluate(measured, max_self_logp_diff=1e-5).passed
    assert evaluate(measured).limits["self_logp_diff_max"] == DEFAULT_MAX_SELF_LOGP_DIFF
    assert evaluate(measured).passed
    assert not evaluate(report(1.5)).passed  # a batching bug moves whole nats


def test_a_batch_invariant_engine_is_held_to_zero_and_to_the_same_tokens() -> None:
    gate = evaluate(report(3.3e-6, invariant=True))
    assert gate.limits["self_logp_diff_max"] == 0.0 and not gate.passed
    assert "invariance does not hold" in gate.suspicious["engine.batch_invariant"]
    exact_but_diverged = evaluate(report(0.0, diverged=1.0, invariant=True))
    assert [x.metric for x in exact_but_diverged.exceeded] == ["self_diverged"]
    both = evaluate(report(3.3e-6, diverged=2.0, invariant=True)).suspicious
    assert "self_logp_diff_max = 3.3e-06 for the batch of 16" in both["engine.batch_invariant"]
    assert evaluate(report(0.0, invariant=True)).passed
    # past 0, a divergence follows from rounding near a sampling boundary: reported, not gated
    assert evaluate(report(1e-6, diverged=1.0), max_self_logp_diff=1e-3).passed


def test_a_batch_whose_sequences_mostly_sample_other_tokens_fails_past_zero_too() -> None:
    """Compared only up to each sequence's first other token, a batch where every sequence
    diverged at its first token compared nothing and reads 0; it must not pass."""
    nothing_compared = report(0.0, diverged=16.0)
    nothing_compared.self_batches[2].metrics.update(tokens=0.0, first_divergence=0.0)
    gate = evaluate(nothing_compared)
    assert not gate.passed
    assert [(x.metric, x.value, x.limit) for x in gate.exceeded] == [("self_diverged", 16.0, 8.0)]
    assert "engine.batch_invariant" in gate.suspicious
    assert evaluate(report(0.0, diverged=8.0)).passed  # half: at the bound, not past it


def test_a_failure_of_the_engine_against_itself_alone_says_what_it_means_first() -> None:
    r = report(3.3e-6)
    gate = evaluate(r, max_self_logp_diff=0.0)
    assert next(iter(gate.suspicious)) == "engine.batch_invariant"
    lines = explain(r, gate)
    flagged = next(line for line in lines if line.strip().startswith("!"))
    assert "engine.batch_invariant = false: batch-dependent numerics" in flagged
    assert "VLLM_BATCH_INVARIANT=1" in flagged and "exact parity must have 0" in flagged


def test_without_a_self_check_the_gate_has_no_self_limit() -> None:
    plain = ParityReport(report(0.0).phases, {"name": "vllm"}, {}, {})
    assert "self_logp_diff_max" not in evaluate(plain).limits
    assert "not run" in self_lines(plain)[1]


def test_the_report_carries_the_figures_in_json_on_the_wire_and_in_the_terminal() -> None:
    r = report(3.3e-6, diverged=2.0)
    r.self_batches[2].metrics["first_divergence"] = 7.0
    r.self_batches[1].metrics["full_kl_mean"] = math.inf
    out = json.loads(json.dumps(r.to_json(), allow_nan=False))
    assert [(b["batch_size"], b["engine_batch"]) for b in out["self_check"]] == [
        (1, 1),
        (4, 4),
        (16, 16),
    ]
    assert out["self_check"][1]["metrics"]["full_kl_mean"] == "inf"
    wire = r.self_metrics()
    assert wire["self_logp_diff_max_b16"] == 3.3e-6
    assert wire["self_first_divergence_b16"] == 7.0
    assert wire["self_engine_batch_b1"] == 1.0 and "self_logp_diff_max_b1" not in wire
    lines = self_lines(r)
    assert lines[2].split()[:3] == ["1", "(reference)", "1"]
    row = lines[4].split()
    assert row[:3] == ["16", "16", "3.3e-06"] and row[-2:] == ["2", "7"]
