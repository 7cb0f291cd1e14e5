"""One training run: the loop, its setup and resume, checkpoints, the run folder's layout, events,
GIFs, seeds, and how ranks of one run stay in step."""
