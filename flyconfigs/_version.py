"""The version of flyconfigs: its one source (the facade and the tuner read it, and
``pyproject.toml`` takes the distribution's version from it)."""

__version__ = "1.0.0"
