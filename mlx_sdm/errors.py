"""The project's error types. Every message names the file, line or field at fault and how to fix it."""

from __future__ import annotations


class MlxSdmError(Exception):
    """Base class: the CLI prints these as one clear line instead of a traceback."""


class DataError(MlxSdmError, ValueError):
    """Bad input data: malformed JSONL, missing or non-integer labels, NaN, unequal widths, ...

    ``DataError(path, line, field, message)`` renders as ``path:line: field: message``.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None, field: str | None = None):
        self.path, self.line, self.field, self.detail = path, line, field, message
        where = ""
        if path is not None:
            where = str(path) + (f":{line}" if line is not None else "") + ": "
        if field is not None:
            where += f"field {field!r}: "
        super().__init__(where + message)


class ArtifactError(MlxSdmError):
    """A saved artifact (estimator, verifier, head, checkpoint) that cannot be used: wrong format
    version, wrong dimension, corrupt file."""


class ModelMismatchError(ArtifactError):
    """A verifier or head built for another model than the one loaded."""


class OfflineError(MlxSdmError):
    """A hub model was named while offline."""


class OutputError(MlxSdmError, OSError):
    """An output path that cannot be written (a folder where a file is asked for, a parent that is a
    file, no permission, an existing artifact without ``--force``). Also an ``OSError``, so code
    that handles a failed write keeps working."""


class MissingDependencyError(MlxSdmError):
    """An optional package is missing; the message gives the exact install command."""
