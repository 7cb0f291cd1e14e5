"""The trainer sizes its threads from the CPU quota it is given (cgroup limits, as under
`docker run --cpus=2`), not from the host's core count."""
from __future__ import annotations

import os

import torch

from envs import pool
from envs.pool import available_cores, cgroup_cpu_quota
from trainer.config import load_config
from trainer.setup import set_threads


def test_cgroup_v2_cpu_max(tmp_path):
    (tmp_path / "cpu.max").write_text("200000 100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) == 2.0
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) is None


def test_cgroup_v1_cfs_quota(tmp_path):
    folder = tmp_path / "cpu,cpuacct"
    folder.mkdir()
    (folder / "cpu.cfs_quota_us").write_text("150000\n")
    (folder / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) == 1.5
    (folder / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(str(tmp_path)) is None


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert cgroup_cpu_quota(str(tmp_path)) is None


def test_usable_cores_are_the_affinity_capped_by_the_quota(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(pool, "cgroup_cpu_quota", lambda: 1.5)
    assert available_cores() == 2
    monkeypatch.setattr(pool, "cgroup_cpu_quota", lambda: None)
    assert available_cores() == 64
    monkeypatch.setattr(pool, "cgroup_cpu_quota", lambda: 0.2)
    assert available_cores() == 1


def test_a_cnn_trains_on_as_many_threads_as_the_quota_allows(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(pool, "cgroup_cpu_quota", lambda: 2.0)
    before = torch.get_num_threads()
    try:
        set_threads(load_config(None, ["model_type=ppo-cnn", "env_name=snake"]), torch.device("cpu"))
        assert torch.get_num_threads() == 2
        set_threads(load_config(None, ["model_type=ppo-small"]), torch.device("cpu"))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
