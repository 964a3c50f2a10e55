"""The gate lives in lib/gate.py, below export and reporting, which both use it. This name is kept only for
notebooks/07_report.ipynb, which imports `format_verdict` and `run_gate` from here; remove it once that notebook
imports them from lib.gate."""

from ..gate import format_verdict, run_gate

__all__ = ["format_verdict", "run_gate"]
