"""A run's settings: the key declarations, where a config starts from, checks, batching, safe YAML,
code permissions and the preflight estimate."""
