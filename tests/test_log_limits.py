"""The rate limit on repeated warnings: the first passes, repeats are held back and counted."""

from __future__ import annotations

import logging
import time

from unilab_lit.telemetry.log_limits import RateLimitFilter


def _logger(name: str, interval_s: float) -> logging.Logger:
    logger = logging.getLogger(f"tests.log_limits.{name}")
    logger.filters.clear()
    logger.addFilter(RateLimitFilter(interval_s=interval_s))
    return logger


def test_repeated_warning_passes_once_per_interval_with_the_held_back_count(caplog):
    logger = _logger("repeat", interval_s=0.2)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        for num_bad in range(60):
            logger.warning("%d env(s) went non-finite", num_bad)
        time.sleep(0.25)
        logger.warning("%d env(s) went non-finite", 7)
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert messages[0] == "0 env(s) went non-finite"
    assert messages[1].startswith("7 env(s) went non-finite [59 more like this in the last")


def test_different_messages_are_limited_separately(caplog):
    logger = _logger("separate", interval_s=60.0)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        for _ in range(5):
            logger.warning("first kind")
            logger.warning("second kind")
    assert [record.getMessage() for record in caplog.records] == ["first kind", "second kind"]
