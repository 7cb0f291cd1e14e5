"""The CPU cores a run may use, and how many pool workers `num_workers` means: one rule for the
worker pool (envs/pool.py), the env registry's log line, the trainer's thread count and the
benchmarks."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from envs.errors import EnvConfigError


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> float | None:
    """The CPUs the container may use (`docker run --cpus=2` -> 2.0): cgroup v2 `cpu.max`
    ("200000 100000"), else v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`; None when unlimited or
    unreadable."""
    try:
        quota, period = (Path(root) / "cpu.max").read_text().split()[:2]
        if quota != "max" and float(period) > 0:
            return float(quota) / float(period)
        return None
    except (OSError, ValueError):
        pass
    for folder in (Path(root) / "cpu,cpuacct", Path(root) / "cpu", Path(root)):
        try:
            quota = float((folder / "cpu.cfs_quota_us").read_text())
            period = float((folder / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return quota / period if quota > 0 and period > 0 else None
    return None


def available_cores() -> int:
    """The CPU cores this process may use: its affinity mask (not the machine's count), capped by
    the container's CPU quota (rounded up: 1.5 CPUs keep two threads busy half the time)."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS / Windows have no affinity mask
        cores = max(1, os.cpu_count() or 1)
    quota = cgroup_cpu_quota()
    return max(1, min(cores, math.ceil(quota))) if quota is not None else cores


def resolve_num_workers(num_workers: int | str | None, num_envs: int) -> int:
    """`auto` -> the usable cores; never more workers than envs."""
    if num_workers is None or (isinstance(num_workers, str) and num_workers.strip().lower() == "auto"):
        count = available_cores()
    elif isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise EnvConfigError(f"num_workers must be a positive integer or 'auto', got {num_workers!r}")
    else:
        count = int(num_workers)
    return max(1, min(count, num_envs))
