"""Errors of the development tooling that the CLI turns into one clear line."""


class DevEnvironmentError(Exception):
    """Something on this machine prevents the local clusters from running.

    The message says what went wrong and what to do; the CLI prints it without
    a stack trace and exits non-zero.
    """
