"""How busy the machine is: CPU and RAM from psutil, NVIDIA GPUs where present.

GPU readings come from pynvml when it is installed, else from `nvidia-smi`, else there are
none (the charts then show CPU and RAM only). Samples are taken when someone looks (each poll
asks), at most every `min_interval` seconds, so an idle studio does no work.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import psutil

from studio.system_chart import UsageSample

GpuReading = tuple[float, float]  # (utilisation %, memory used %), averaged over GPUs


def _nvml_reader() -> Callable[[], GpuReading | None] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 - no driver / no GPU: pynvml raises its own error types
        return None
    if not handles:
        return None

    def read() -> GpuReading | None:
        try:
            utilisation = [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles]
            memory = [pynvml.nvmlDeviceGetMemoryInfo(h) for h in handles]
        except Exception:  # noqa: BLE001
            return None
        used = sum(m.used for m in memory) / max(1, sum(m.total for m in memory)) * 100.0
        return sum(utilisation) / len(utilisation), used

    return read


def parse_nvidia_smi(output: str) -> GpuReading | None:
    """Average utilisation and memory-used percentage from
    `nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`."""
    utilisation, used, total = [], 0.0, 0.0
    for line in output.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            gpu, memory_used, memory_total = (float(part) for part in parts)
        except ValueError:
            continue  # "[N/A]" on some boards
        utilisation.append(gpu)
        used += memory_used
        total += memory_total
    if not utilisation or total <= 0:
        return None
    return sum(utilisation) / len(utilisation), used / total * 100.0


def _nvidia_smi_reader() -> Callable[[], GpuReading | None] | None:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    command = [executable, "--query-gpu=utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]

    def read() -> GpuReading | None:
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=3, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return parse_nvidia_smi(result.stdout) if result.returncode == 0 else None

    if read() is None:
        return None
    return read


class SystemMonitor:
    """Keeps the last `history` usage samples; `sample()` adds one when `min_interval` passed."""

    def __init__(self, min_interval: float = 2.0, history: int = 300, gpu: bool = True):
        self.min_interval = min_interval
        self._samples: deque[UsageSample] = deque(maxlen=history)
        self._lock = threading.Lock()
        self._read_gpu = (_nvml_reader() or _nvidia_smi_reader()) if gpu else None
        psutil.cpu_percent(interval=None)  # the first reading is always 0: prime it

    @property
    def has_gpu(self) -> bool:
        return self._read_gpu is not None

    def sample(self) -> list[UsageSample]:
        """Take a reading if the last one is older than `min_interval`; return the history."""
        with self._lock:
            now = time.time()
            if not self._samples or now - self._samples[-1].time >= self.min_interval:
                gpu = self._read_gpu() if self._read_gpu else None
                self._samples.append(
                    UsageSample(
                        time=now,
                        cpu_percent=psutil.cpu_percent(interval=None),
                        ram_percent=psutil.virtual_memory().percent,
                        gpu_percent=gpu[0] if gpu else None,
                        gpu_memory_percent=gpu[1] if gpu else None,
                    )
                )
            return list(self._samples)


def nvidia_driver_present() -> bool:
    """Whether this machine (or container) shows an NVIDIA driver: without one there is no CUDA
    device, and torch (seconds to import) need not be asked."""
    return Path("/proc/driver/nvidia").exists() or bool(glob.glob("/dev/nvidia[0-9]*"))


def available_devices() -> list[str]:
    """What the device dropdown offers: auto, cpu and each visible CUDA device. Without an NVIDIA
    driver it answers without importing torch, so the page is up seconds sooner."""
    devices = ["auto", "cpu"]
    if not nvidia_driver_present():
        return devices
    try:
        import torch

        devices += [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - a broken CUDA setup still leaves auto and cpu
        pass
    return devices
