"""Token exemplars: the top |d| tokens and a uniform sample of a step, checked against a
reference that sorts every valid token by |d| with plain Python."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from collectors import compute_step_metrics
from collectors._exemplars import MAX_EXEMPLARS, decode
from tests.collectors.test_transport import FakeTransport, make_run


def step(seed: int = 0, shape: tuple[int, int] = (24, 80)) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(seed)
    lr = np.log(rng.uniform(1e-5, 1.0, shape)).astype(np.float32)
    lt = (lr + rng.normal(0, 0.1, shape)).astype(np.float32)
    mask = rng.uniform(size=shape) < 0.8
    return lr, lt, mask


def reference_top(lr: Any, lt: Any, mask: Any, k: int) -> list[tuple[int, int]]:
    """(seq, pos) of the k valid tokens with the largest |d|, by a full Python sort."""
    tokens = [
        (abs(float(lt[i, j]) - float(lr[i, j])), i, j)
        for i in range(lr.shape[0])
        for j in range(lr.shape[1])
        if mask[i, j]
    ]
    tokens.sort(reverse=True)
    return [(i, j) for _, i, j in tokens[:k]]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_top_exemplars_are_the_largest_abs_log_ratios_in_order(backend: str) -> None:
    lr, lt, mask = step()
    args = (lr, lt, mask)
    if backend == "torch":
        args = tuple(torch.from_numpy(a) for a in args)  # type: ignore[assignment]
    found = compute_step_metrics(*args, exemplars=16).exemplars
    top = [e for e in found if e["kind"] == "top"]
    assert [(e["seq"], e["pos"]) for e in top] == reference_top(lr, lt, mask, 16)
    for e in top:
        assert e["rollout_logprob"] == pytest.approx(float(lr[e["seq"], e["pos"]]))
        assert e["trainer_logprob"] == pytest.approx(float(lt[e["seq"], e["pos"]]))


def test_uniform_exemplars_are_distinct_valid_tokens_and_repeatable() -> None:
    lr, lt, mask = step(1)
    first = [e for e in compute_step_metrics(lr, lt, mask, exemplars=32).exemplars]
    again = compute_step_metrics(lr, lt, mask, exemplars=32).exemplars
    uniform = [(e["seq"], e["pos"]) for e in first if e["kind"] == "uniform"]
    assert len(uniform) == 32 == len(set(uniform))
    assert all(mask[i, j] for i, j in uniform)
    assert first == again
    # Not simply the top tokens again: a uniform sample mostly holds ordinary ones.
    assert len(set(uniform) & set(reference_top(lr, lt, mask, 32))) < 16


def test_a_nan_token_is_the_first_exemplar() -> None:
    lr, lt, mask = step(2)
    mask[5, 7] = True
    lt[5, 7] = np.nan
    top = compute_step_metrics(lr, lt, mask, exemplars=4).exemplars[0]
    assert (top["seq"], top["pos"]) == (5, 7)
    assert math.isnan(top["trainer_logprob"])


def test_padding_is_never_an_exemplar_when_few_tokens_differ() -> None:
    lr = np.full((4, 10), -1.0, np.float32)
    lt = lr.copy()
    lt[1, 2] = -0.5
    mask = np.zeros((4, 10), bool)
    mask[1, :3] = True
    found = compute_step_metrics(lr, lt, mask, exemplars=8).exemplars
    assert {(e["seq"], e["pos"]) for e in found} == {(1, 0), (1, 1), (1, 2)}
    assert (found[0]["seq"], found[0]["pos"]) == (1, 2)


def test_packed_inputs_give_sequence_and_position_with_token_ids() -> None:
    lens = [3, 5, 2]
    lr = np.full(10, -1.0, np.float32)
    lt = lr.copy()
    lt[6] = 0.0  # the 4th token of the second sequence
    ids = np.arange(100, 110)
    ex = compute_step_metrics(lr, lt, seq_lens=lens, exemplars=1, token_ids=ids).exemplars[0]
    assert (ex["seq"], ex["pos"], ex["token_id"]) == (1, 3, 106)


def test_exemplar_count_is_bounded() -> None:
    lr, lt, mask = step()
    with pytest.raises(ValueError, match="512"):
        compute_step_metrics(lr, lt, mask, exemplars=MAX_EXEMPLARS + 1)
    assert compute_step_metrics(lr, lt, mask).exemplars == []


class CharTokenizer:
    """Token id n decodes to chr(n): enough to check which ids were decoded where."""

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)


def test_decode_gives_the_token_and_the_text_just_before_it() -> None:
    rows = [[ord(c) for c in "hello world"]]
    found = decode(
        [{"seq": 0, "pos": 6}], rows, CharTokenizer(), prefixes=[[ord(c) for c in ">> "]]
    )
    assert found[0]["token"] == "w"
    assert found[0]["context"] == ">> hello "


def test_log_step_sends_exemplars_with_token_text(tmp_path: Path) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    lr, lt, mask = step(3, (4, 12))
    ids = np.full((4, 12), ord("a"))
    ids[0, :] = [ord(c) for c in "abcdefghijkl"]
    lt[0, 5] = np.nan
    mask[0, 5] = True
    run.log_step(0, lr, lt, mask, exemplars=3, token_ids=ids, tokenizer=CharTokenizer())
    assert run.flush(10)
    record = transport.records()[0]
    first = record["exemplars"][0]
    assert first["kind"] == "top"
    assert (first["token"], first["context"], first["trainer_logprob"]) == ("f", "abcde", "nan")
    assert sorted(e["kind"] for e in record["exemplars"]) == ["top"] * 3 + ["uniform"] * 3
    run.close()
