"""The networks: policies and value functions by model_type, and the running normalisers."""
