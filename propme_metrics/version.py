"""PropMe's version: the one definition (setup.cfg and every document PropMe writes read it here)."""

#: a development version: the unreleased code after 0.2.0 changes results (CHANGELOG.md's next release)
__version__ = "0.3.0.dev0"
