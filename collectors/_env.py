"""What the collectors record about the machine they run on (GPU name and count, host).

Nothing here imports torch: importing it costs seconds, so it is consulted only when the host
process has already imported it.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Any


def gpu_info() -> tuple[str, int]:
    """(device name, device count); ("cpu", 0) without CUDA or without torch loaded."""
    torch: Any = sys.modules.get("torch")
    if torch is None:
        return "cpu", 0
    try:
        if torch.cuda.is_available():
            count = int(torch.cuda.device_count())
            index = torch.cuda.current_device()
            return str(torch.cuda.get_device_name(index)), count
    except Exception:
        pass
    return "cpu", 0


def host_info() -> dict[str, Any]:
    gpu, count = gpu_info()
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "python": platform.python_version(),
        "gpu": gpu,
        "gpu_count": count,
    }
    torch: Any = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = getattr(torch, "__version__", "unknown")
    return info


def default_actor(source: str = "trainer") -> str:
    rank = os.environ.get("RANK") or os.environ.get("LOCAL_RANK") or "0"
    return f"{source}-{rank}"
