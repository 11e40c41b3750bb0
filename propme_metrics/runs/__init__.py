"""Reading lm-eval output: results files and their samples files (`files`), their rows (`samples`),
typed runs (`lmeval`) and the generations `propme trace` reads (`generations`). Below `metrics/`:
it reads and types, and computes nothing."""
