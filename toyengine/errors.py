"""Exception and warning hierarchy of toyengine.

Every error raised on purpose by toyengine derives from :class:`ToyEngineError` and also
from the matching builtin, so ``except ValueError`` keeps working for users who do not
know our types.
"""

from __future__ import annotations

import reprlib

#: repr of bad values in messages: bounded, so a huge value cannot make a huge message
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 3, 4, 4, 4, 4
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 60, 60, 40


class ToyEngineError(Exception):
    """Root of all toyengine errors."""


class ModelError(ToyEngineError, ValueError):
    """A model, parameter or observable was built with invalid inputs.

    The message names the offending parameter (or component) and the problem.
    """


class OptionError(ModelError):
    """A builder option is invalid. ``path`` is the option's path inside the builder's
    ``options`` (e.g. ``components[1].shape``); the study-file validation prefixes it with
    the model's path."""

    def __init__(self, path: str, value: object, expected: str):
        self.path = path
        self.value = value
        self.expected = expected
        where = f"options.{path}" if path else "options"
        super().__init__(f"{where}: got {value!r}; expected {expected}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        # rebuilt from the constructor's arguments: raised on a worker, it reaches the
        # client whole (the default pickles only the message, which __init__ cannot take)
        return type(self), (self.path, self.value, self.expected)


class SpecError(ToyEngineError, ValueError):
    """A study file is invalid. The message gives the YAML path, the bad value and what
    was expected."""

    def __init__(self, path: str, value: object, expected: str, source: str | None = None):
        self.path = path
        self.value = value
        self.expected = expected
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: got {_REPR.repr(value)}; expected {expected}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return type(self), (self.path, self.value, self.expected, self.source)


class StoreError(ToyEngineError, RuntimeError):
    """A result store is missing, corrupt, or belongs to a different study."""


class StoreWriteError(ToyEngineError, OSError):
    """The store cannot be written where it is: a full disk, an exceeded quota, a read-only
    file system or missing permission. The message names the store and the problem; what
    was written before is intact, so the same command resumes once the cause is fixed."""


class StoreUnreachableError(ToyEngineError, ConnectionError):
    """The service holding the store cannot be reached: an object-store endpoint that is
    down or refuses connections, a broken network. The message names the store and the
    cause; what was written before is intact, so the same command resumes once the service
    is back."""


class LeaseLost(ToyEngineError, RuntimeError):
    """The run lost the store's lease to another run (it paused, or could not renew, for
    longer than the lease lasts): it stopped writing. The message names the store and the
    lease epochs; the CLI exits with 5. What the other run wrote is kept; run the same
    command again to finish whatever is not done."""


class SummaryError(ToyEngineError, ValueError):
    """A results Dataset or an argument cannot be summarised as asked. The message names
    the variable, attribute or argument and what was expected."""


class MissingDependencyError(ToyEngineError, ImportError):
    """An optional dependency (e.g. matplotlib for plots) is not installed."""


class ClusterError(ToyEngineError, RuntimeError):
    """A cluster could not be configured, started or reached. The message says which
    setting or command failed and how to fix it."""


class UsageError(ToyEngineError, ValueError):
    """A command-line argument (or its API equivalent) is invalid; the CLI exits with 2."""


class ConfirmationNeeded(UsageError):
    """The run is large enough that the user must confirm it (``--yes``)."""


class Interrupted(ToyEngineError):
    """A run was interrupted (Ctrl-C, SIGTERM); the chunks written are kept. ``saved``
    counts the toys the store holds when the run stops; ``in_flight`` bounds those that
    tasks still running on a cluster that outlives the run may add."""

    def __init__(self, saved: int, total: int, in_flight: int = 0):
        self.saved, self.total, self.in_flight = saved, total, in_flight
        more = (f" (up to {in_flight} more may still land: tasks that were running on the "
                "cluster's workers finish and write their chunks; `toyengine status` counts "
                "them)" if in_flight else "")
        super().__init__(f"interrupted: {saved}/{total} toys saved{more}; run the same "
                         "command to resume")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return type(self), (self.saved, self.total, self.in_flight)


class ToyEngineWarning(RuntimeWarning):
    """Root of toyengine warnings."""


class FitFailureWarning(ToyEngineWarning):
    """A fit did not converge; it is recorded with ``valid=False``."""


class DegenerateVariantWarning(ToyEngineWarning):
    """A variant's generator density equals the nominal's or another variant's: its
    systematic shift is zero by construction (the study is probably mis-specified)."""
