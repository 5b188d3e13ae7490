"""Argument checks shared by the config-schema constructors (one message format everywhere)."""

from __future__ import annotations

from typing import Any


def check_arg(ok: bool, name: str, value: Any, valid: str) -> None:
    """Raise ``ValueError("<name> must be <valid>, got <value>")`` unless ``ok``.

    Raises:
        ValueError: if ``ok`` is false; the message names the argument, the valid range and
            the bad value.
    """
    if not ok:
        raise ValueError(f"{name} must be {valid}, got {value!r}")
