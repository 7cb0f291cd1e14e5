"""The algorithms: how experience is collected and how the networks learn from it, one file each."""
