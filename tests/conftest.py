"""Shared test setup: headless pygame, offline Gradio, and a device chosen by the environment.

RL_STUDIO_TEST_DEVICE=cuda runs the device-aware tests on a GPU (benchmarks/gpu_check.sh does);
the default is the CPU.
"""

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest


@pytest.fixture(scope="session")
def test_device() -> str:
    """The device tests run on: `cpu` unless RL_STUDIO_TEST_DEVICE says otherwise."""
    return os.environ.get("RL_STUDIO_TEST_DEVICE", "cpu")


@pytest.fixture
def one_torch_thread():
    """Train on one torch thread (as fast as two for these small networks, and half the CPU)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
