"""What became of a fit, as small integer enums stored in the result store.

This module imports nothing but the standard library, so that readers of a store (the
summaries) can decode ``status`` and ``fail_reason`` without importing the fitter.
"""

from __future__ import annotations

import enum

__all__ = ["FailReason", "FitStatus"]


class FitStatus(enum.IntEnum):
    """What became of one fit; stored as ``int8`` in the result store's ``status``.

    ``NOT_RUN`` (0) is the fill value of a toy not yet run; ``VALID`` (1) a minimum that
    iminuit accepts (``FunctionMinimum.is_valid``, with a positive-definite HESSE matrix);
    ``INVALID`` (2) a fit that ran and did not converge; ``EXCEPTION`` (3) a generator,
    model or minimiser that raised (the message is issued as a warning).
    """

    NOT_RUN = 0
    VALID = 1
    INVALID = 2
    EXCEPTION = 3


class FailReason(enum.IntEnum):
    """Why a fit failed; stored as ``int8`` in the result store's ``fail_reason``.

    ``NONE`` (0) for a valid fit or one not run; ``GENERATION`` (1) the toy's generation
    raised; ``EXCEPTION`` (2) the model's likelihood or the minimiser raised; ``NOT_FINITE``
    (3) −ln L not finite at the minimum; ``NOT_POSDEF`` (4) MIGRAD converged but the HESSE
    covariance is not positive definite; ``CALL_LIMIT`` (5) MIGRAD's call limit;
    ``EDM`` (6) the estimated distance to the minimum stayed above tolerance; ``OTHER`` (7).
    """

    NONE = 0
    GENERATION = 1
    EXCEPTION = 2
    NOT_FINITE = 3
    NOT_POSDEF = 4
    CALL_LIMIT = 5
    EDM = 6
    OTHER = 7

    @property
    def text(self) -> str:
        """A short phrase for reports."""
        return _REASON_TEXT[self]


_REASON_TEXT = {
    FailReason.NONE: "none", FailReason.GENERATION: "generation raised",
    FailReason.EXCEPTION: "likelihood or fitter raised", FailReason.NOT_FINITE: "−ln L not finite",
    FailReason.NOT_POSDEF: "covariance not positive definite",
    FailReason.CALL_LIMIT: "call limit reached", FailReason.EDM: "EDM above tolerance",
    FailReason.OTHER: "not converged"}
