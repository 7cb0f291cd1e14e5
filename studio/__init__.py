"""RL Studio's web front end (Gradio).

`studio.runs` (RunManager, RunState) and `studio.charts` / `studio.system` never import
gradio, so they can be used and tested on their own; `studio.ui` builds the page.
"""
