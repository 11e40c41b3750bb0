"""`propme report`: runs loaded from lm-eval output, PM with intervals, tables, plots, HTML."""
