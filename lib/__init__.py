"""The workbook's package: everything a notebook or `python -m lib <verb>` calls."""

import warnings

# Executed notebooks have no ipywidgets; tqdm.auto then falls back to text bars, which is what we want, silently.
warnings.filterwarnings("ignore", message="IProgress not found")
