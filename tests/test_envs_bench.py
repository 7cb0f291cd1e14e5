"""The speed benchmark runs and prints its table (figures are printed, never asserted)."""

import json

from benchmarks.envs import main


def test_benchmark_prints_a_table_with_the_gymnasium_baselines(capsys, tmp_path):
    out = tmp_path / "bench.json"
    args = ["--num-envs", "2", "--envs", "cartpole", "snake", "--seconds", "0.01", "--repeats", "1", "--json", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    for row in (
        "| cartpole | ours (torch) | cpu | 2 |",
        "| snake | ours (torch) | cpu | 2 |",
        "| cartpole | Gymnasium SyncVectorEnv | cpu | 2 |",
        "| cartpole | Gymnasium make_vec numpy | cpu | 2 |",
    ):
        assert row in printed
    measurements = json.loads(out.read_text())
    assert len(measurements) == 4 and all(m["steps_per_second"] > 0 for m in measurements)
