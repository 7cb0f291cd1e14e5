"""`Studio`: every tab's event functions joined in one object, the one a page wires (`demo.studio`)
and the one tests call. Each tab's own functions live with its layout: studio/train_tab.py (the
form in studio/train_form.py), runs_tab.py, evaluate_tab.py, sweeps_tab.py; the API's in http_api.py.
"""

from __future__ import annotations

from studio.evaluate_tab import EvaluateTab
from studio.http_api import HttpApi
from studio.runs_tab import RunsTab
from studio.sweeps_tab import SweepsTab
from studio.train_tab import TrainTab


class Studio(TrainTab, RunsTab, EvaluateTab, HttpApi, SweepsTab):
    """The page's event functions. Shared state: the RunManager (and a usage sampler)."""
