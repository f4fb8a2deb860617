"""multikueue: Kueue's multi-cluster job dispatcher (MultiKueue) in Python."""

__version__ = "0.1.0"
