"""structlog set-up shared by the controller and the CLI.

The controller logs JSON (one object per line, keys such as ``workload``,
``cluster`` and ``gvk``) for log pipelines; the CLI logs readable key=value
lines to stderr so they never mix with a command's output on stdout.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(*, json_output: bool, level: str = "INFO") -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json_output else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
