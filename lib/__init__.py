"""The workbook's package: everything a notebook or `python -m lib <verb>` calls."""
