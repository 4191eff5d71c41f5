"""Rollout engines for the demo: real vLLM (in-process) or a pure-torch sampler.

Both return vLLM-shaped request outputs (prompt ids, completions with the sampled tokens'
logprobs), so the same RolloutCollector reads either.
"""

from __future__ import annotations

import contextlib
import copy
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any


@dataclass(frozen=True)
class EngineOptions:
    logprobs_mode: str = "processed_logprobs"
    prefix_caching: bool = False
    head_dtype: str = "float32"
    reset_cache_on_update: bool = True


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


class VllmEngine:
    name = "vllm"

    def __init__(self, model_dir: Path, options: EngineOptions, *, seed: int = 0) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        self.options = options
        self.llm = LLM(
            model=str(model_dir),
            dtype="float32",
            enforce_eager=True,
            kv_cache_memory_bytes=128 << 20,
            seed=seed,
            logprobs_mode=options.logprobs_mode,
            enable_prefix_caching=options.prefix_caching,
            hf_overrides={"head_dtype": options.head_dtype},
        )

    def generate(
        self, prompts: list[list[int]], *, n: int, temperature: float, max_tokens: int, seed: int
    ) -> list[Any]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(
            n=n, temperature=temperature, max_tokens=max_tokens, logprobs=0, seed=seed
        )
        self.params = params
        return list(
            self.llm.generate(
                [TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False
            )
        )

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": iter(state_dict.items())}
        )
        if self.options.reset_cache_on_update:
            self.llm.reset_prefix_cache()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.llm.llm_engine.engine_core.shutdown()


class TorchEngine:
    """Samples from a copy of the policy with plain torch: the demo without vLLM installed."""

    name = "torch"

    def __init__(self, model: Any, options: EngineOptions, *, seed: int = 0) -> None:
        import torch

        self.options = options
        self.model = copy.deepcopy(model).eval()
        self.generator = torch.Generator().manual_seed(seed)
        self.params = SimpleNamespace(temperature=1.0, top_p=1.0, top_k=0, n=1, max_tokens=0)

    def config(self) -> dict[str, Any]:
        import torch

        return {
            "engine": "torch",
            "version": torch.__version__,
            "logprobs_mode": self.options.logprobs_mode,
            "enable_prefix_caching": False,
            "async_scheduling": False,
            "head_dtype": self.options.head_dtype,
            "dtype": "float32",
            "gpu": "cpu",
            "gpu_count": 0,
        }

    def generate(
        self, prompts: list[list[int]], *, n: int, temperature: float, max_tokens: int, seed: int
    ) -> list[Any]:
        import torch

        self.params = SimpleNamespace(
            temperature=temperature, top_p=1.0, top_k=0, n=n, max_tokens=max_tokens
        )
        outputs = []
        with torch.no_grad():
            for prompt in prompts:
                ids = torch.tensor([prompt] * n)
                chosen: list[list[int]] = [[] for _ in range(n)]
                logps: list[list[float]] = [[] for _ in range(n)]
                past = None
                for _ in range(max_tokens):
                    out = self.model.model(ids, past_key_values=past, use_cache=True)
                    past = out.past_key_values
                    hidden = out.last_hidden_state[:, -1]
                    head = self.model.lm_head.weight
                    if self.options.head_dtype == "bfloat16":
                        logits = (hidden.to(torch.bfloat16) @ head.to(torch.bfloat16).T).float()
                    else:
                        logits = hidden @ head.T
                    scaled = torch.log_softmax(logits / temperature, dim=-1)
                    token = torch.multinomial(scaled.exp(), 1, generator=self.generator)
                    report = (
                        torch.log_softmax(logits, -1)
                        if self.options.logprobs_mode.startswith("raw")
                        else scaled
                    )
                    lp = report.gather(1, token).squeeze(1)
                    for i in range(n):
                        chosen[i].append(int(token[i]))
                        logps[i].append(float(lp[i]))
                    ids = token
                completions = [
                    SimpleNamespace(
                        token_ids=chosen[i],
                        logprobs=[
                            {t: SimpleNamespace(logprob=v)}
                            for t, v in zip(chosen[i], logps[i], strict=True)
                        ],
                        finish_reason="length",
                    )
                    for i in range(n)
                ]
                outputs.append(
                    SimpleNamespace(
                        prompt_token_ids=prompt, num_cached_tokens=0, outputs=completions
                    )
                )
        return outputs

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        self.model.load_state_dict(state_dict)

    def close(self) -> None:
        pass
