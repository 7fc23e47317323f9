"""Exceptions: every failure carries the library's status code and, for the library's own
failures, its fls_status_string."""

from __future__ import annotations

from . import _capi


def status_name(status: int) -> str:
    """FLS_ERR_NAN for -7, and so on ("FLS_STATUS(n)" for an unknown code)."""
    return _capi.STATUS_NAMES.get(int(status), "FLS_STATUS(%d)" % int(status))


def status_string(status: int) -> str:
    """The library's fls_status_string for a status code."""
    return _capi.fls_status_string(int(status)).decode("utf-8", "replace")


class FlashSampleError(Exception):
    """An error of the library, or one the bindings caught before calling it.

    Attributes: status (the fls_status code, negative), status_name ("FLS_ERR_NAN"), library_message
    (fls_status_string(status)), function (the C function, or the Python call that refused the
    input), detail (what the bindings know beyond the status: which argument, which row).
    """

    def __init__(self, status: int, function: str = "", detail: str = ""):
        self.status = int(status)
        self.status_name = status_name(status)
        self.library_message = status_string(status)
        self.function = function
        self.detail = detail
        where = function + ": " if function else ""
        if detail:
            text = "%s%s (%s: %s)" % (where, detail, self.status_name, self.library_message)
        else:
            text = "%s%s (%s)" % (where, self.library_message, self.status_name)
        super().__init__(text)


class FlashSampleValueError(FlashSampleError, ValueError):
    """A shape, size, range or device mismatch caught in Python before the C call."""


class FlashSampleTypeError(FlashSampleError, TypeError):
    """A dtype (or argument type) mismatch caught in Python before the C call."""


def check(status: int, function: str, detail: str = "") -> None:
    if status != _capi.FLS_OK:
        raise FlashSampleError(status, function, detail)


def value_error(status: int, function: str, detail: str) -> FlashSampleValueError:
    return FlashSampleValueError(status, function, detail)


def type_error(function: str, detail: str) -> FlashSampleTypeError:
    return FlashSampleTypeError(-5, function, detail)  # FLS_ERR_DTYPE
