"""A pytest plugin for the GPU check: keep only the tests that run on the chosen device.

    RL_STUDIO_TEST_DEVICE=cuda python -m pytest -p benchmarks.pytest_device_tests -m "not slow"

Tests that take the `test_device` fixture (tests/conftest.py) run on RL_STUDIO_TEST_DEVICE;
every other test runs on the CPU whatever the machine, so on a GPU machine it proves nothing new
and only spends the check's five minutes. This plugin deselects those.
"""

from __future__ import annotations


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        (kept if "test_device" in getattr(item, "fixturenames", ()) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
