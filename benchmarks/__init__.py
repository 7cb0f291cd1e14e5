"""RL Studio's benchmark suite against Stable-Baselines3: `python -m benchmarks --help`."""
