"""The prompt set of a parity check: a small built-in one, or a JSONL file.

The built-in set mixes short prompts with long ones that share a long common prefix, so that a
prefix cache has whole blocks to reuse (vLLM caches in blocks of up to 128 tokens on CPU): the
stale-prefix-cache hazard of an in-place weight update is then reproducible, not hypothetical.
"""

from __future__ import annotations

import json
from pathlib import Path

_SENTENCE = (
    "the policy samples a token and the trainer scores the same token again with its own "
    "weights so the two logprobs should agree to rounding when the engine and the trainer "
    "compute the same distribution over the vocabulary"
)
_WORDS = _SENTENCE.split(" ")

_SHARED = " ".join((_WORDS * 6)[:150])

BUILTIN_PROMPTS: tuple[str, ...] = (
    "the policy reward",
    "one two three four",
    "engine trainer rollout sample",
    "cache prefix batch update weight",
    f"{_SHARED} answer one",
    f"{_SHARED} answer two",
    f"{_SHARED} prompt three",
    f"{_SHARED} prompt four",
)


class PromptFileError(ValueError):
    """A prompt file that cannot be read; the message names the file and line."""


def load_prompts(path: str | Path) -> list[str]:
    """Prompts from a JSONL file: one per line, either a JSON string or an object with a
    string `prompt` (other keys are ignored, so a dataset export can be used as it is). Blank
    lines are skipped; anything else is an error naming the file and the line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptFileError(f"{path}: cannot read the prompt file: {exc}") from exc
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
        if isinstance(item, dict):
            item = item.get("prompt")
        if not isinstance(item, str) or not item.strip():
            raise PromptFileError(
                f'{path}:{number}: expected a JSON string or an object with a non-empty "prompt" '
                "string"
            )
        prompts.append(item)
    if not prompts:
        raise PromptFileError(f"{path}: no prompts in the file")
    return prompts
