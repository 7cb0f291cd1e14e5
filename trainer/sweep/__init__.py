"""The room of hyperparameter sweeps: Optuna studies over the declared config keys, each trial a
normal run folder (`python -m trainer sweep`, docs/sweeps.md)."""
