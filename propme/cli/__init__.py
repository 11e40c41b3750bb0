"""The `propme` command."""
