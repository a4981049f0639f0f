"""Errors that name what is wrong, so a user can fix a config without reading code."""
from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration value; the message starts with the offending field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class DataError(ValueError):
    """Unusable input data; the message names the file or source."""


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete or inconsistent."""
