"""The version of flyconfigs (one place; the facade and the tuner read it)."""

__version__ = "1.0.0"
