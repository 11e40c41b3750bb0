"""`propme demo`: a small corpus and a model trained to memorize part of it, run end to end."""
