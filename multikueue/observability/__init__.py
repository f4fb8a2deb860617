"""Logs, metrics and events: how the controller tells people what it does."""
