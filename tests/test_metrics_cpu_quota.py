"""Resources: the trainer sizes its threads from the CPU quota it is given (cgroup limits, as under
`docker run --cpus=2`), not from the host's core count; a run refuses a nearly full runs disk."""

from __future__ import annotations

import os

import torch

from envs import cores
from envs.cores import available_cores, cgroup_cpu_quota
from trainer.config.defaults import load_config
from trainer.run.setup import set_threads


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
    monkeypatch.setattr(cores, "cgroup_cpu_quota", lambda: 1.5)
    assert available_cores() == 2
    monkeypatch.setattr(cores, "cgroup_cpu_quota", lambda: None)
    assert available_cores() == 64
    monkeypatch.setattr(cores, "cgroup_cpu_quota", lambda: 0.2)
    assert available_cores() == 1


def test_a_cnn_trains_on_as_many_threads_as_the_quota_allows(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(cores, "cgroup_cpu_quota", lambda: 2.0)
    before = torch.get_num_threads()
    try:
        set_threads(load_config(None, ["model_type=ppo-cnn", "env_name=snake"]), torch.device("cpu"))
        assert torch.get_num_threads() == 2
        set_threads(load_config(None, ["model_type=ppo-small"]), torch.device("cpu"))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_run_refuses_to_start_when_the_runs_disk_is_almost_full(tmp_path, monkeypatch):
    import shutil as shutil_module

    import pytest

    from trainer.config.checks import ConfigError
    from trainer.config.preflight import check_writable_folder

    check_writable_folder(tmp_path / "runs", "--runs-dir")  # plenty of space: fine
    usage = shutil_module.disk_usage(tmp_path)
    monkeypatch.setattr(shutil_module, "disk_usage", lambda path: usage._replace(free=10 * 2**20))
    with pytest.raises(ConfigError, match=r"--runs-dir .*only 10 MiB free.*at least 100 MiB"):
        check_writable_folder(tmp_path / "runs", "--runs-dir")
