"""PropMe's application: the `propme` command (`propme.cli`) and the offline demo (`propme.demo`).

It sits above the library (`propme_metrics`) and the lm-eval plugin (`propme_tasks`) and is imported by
neither; Python users call the library (docs/python-api.md)."""
