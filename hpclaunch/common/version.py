"""The version, in the bottom layer so that every layer may print it."""

__version__ = "0.1.0"
