"""The fraq asv suite (``asv run --python=same``); see docs/benchmarks.md.

asv imports this package by path. It benchmarks whatever ``import fraq`` finds: an
installed fraq, or the checkout named by ASV_PYTHONPATH (benchmarks/regress.py sets it to
each commit's checkout). With neither, the repository this suite lives in is used.
"""

import importlib.util
import os
import sys

if importlib.util.find_spec("fraq") is None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
