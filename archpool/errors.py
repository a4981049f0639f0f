"""Errors that name what is wrong, so a user can fix a config without reading code."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration value; the message starts with the offending field."""

    def __init__(self, field: object, message: str):
        # a YAML key may be null, a number or carry control characters: name it on one line all the same
        self.field = field if isinstance(field, str) and field.isprintable() else repr(field)
        self.message = message
        super().__init__(f"{self.field}: {message}")

    def under(self, prefix: str) -> ConfigError:
        """The same error with its field named under ``prefix`` (``lr`` under ``train`` is ``train.lr``;
        ``[1].lr`` under ``extension`` is ``extension[1].lr``)."""
        if not prefix:
            return ConfigError(self.field, self.message)
        sep = "" if self.field.startswith("[") else "."
        return ConfigError(f"{prefix}{sep}{self.field}", self.message)


class DataError(ValueError):
    """Unusable input data; the message names the file or source."""


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete or inconsistent."""


class TrainingHealthError(DataError):
    """A training run that diverged, collapsed or did not learn (``archpool.train.stability.check_health``):
    a failure of that run, not a result; the message names the run directory and the broken clause."""


class StateError(DataError):
    """An archpool-owned file or directory that is damaged, unsafe or in use; the message names it and how to recover."""


class LockError(StateError):
    """A run or pool directory that another live process is writing."""
