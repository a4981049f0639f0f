"""Errors that name what is wrong, so a user can fix a config without reading code."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration value; the message starts with the offending field."""

    def __init__(self, field: str, message: str):
        self.field = field if field.isprintable() else repr(field)  # a key with control characters stays one line
        super().__init__(f"{self.field}: {message}")


class DataError(ValueError):
    """Unusable input data; the message names the file or source."""


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete or inconsistent."""
