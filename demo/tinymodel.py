"""A tiny random-weight causal LM and its tokenizer, built locally (nothing is downloaded).

Qwen2 architecture, hidden 128, 2 layers, 4 heads / 2 KV heads, vocab 2048: ~0.8 M parameters,
enough for vLLM to run it on a CPU at about 1,500 tokens/s. Embedding and head are scaled so the
output distribution is far from uniform, which makes logprob differences visible.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

VOCAB = 2048
WORDS = (
    "the",
    "a",
    "policy",
    "reward",
    "token",
    "step",
    "model",
    "engine",
    "trainer",
    "rollout",
    "sample",
    "update",
    "weight",
    "cache",
    "prefix",
    "batch",
    "logit",
    "head",
    "ratio",
    "clip",
    "drift",
    "spike",
    "entropy",
    "gradient",
    "norm",
    "value",
    "advantage",
    "group",
    "prompt",
    "answer",
    "yes",
    "no",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "zero",
)


def _corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        n = rng.randint(4, 16)
        words = [rng.choice(WORDS) for _ in range(n)]
        words += [str(rng.randint(0, 999)) for _ in range(rng.randint(0, 3))]
        rng.shuffle(words)
        out.append(" ".join(words))
    return out


def _complete(directory: Path) -> bool:
    return (
        (directory / "config.json").exists()
        and (directory / "model.safetensors").exists()
        and (directory / "tokenizer.json").exists()
    )


def build_tiny_model(
    directory: str | Path,
    *,
    seed: int = 0,
    dtype: str = "float32",
    vocab_size: int = VOCAB,
    hidden_size: int = 128,
    layers: int = 2,
) -> Path:
    """Write config, weights and tokenizer to `directory` (reused when already complete)."""
    directory = Path(directory)
    if _complete(directory):
        return directory
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|pad|>"
    )
    fast.save_pretrained(directory)

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=fast.eos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    model = Qwen2ForCausalLM(config)  # type: ignore[no-untyped-call]
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(10.0)
        model.lm_head.weight.mul_(10.0)
    model.to(getattr(torch, dtype))
    model.save_pretrained(directory, safe_serialization=True)
    meta: dict[str, Any] = {
        "seed": seed,
        "dtype": dtype,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    (directory / "tiny_model.json").write_text(json.dumps(meta))
    return directory
