"""multikueue: Kueue's multi-cluster job dispatcher (MultiKueue) in Python."""

__version__ = "0.1.0"

#: Who we are in the API servers' audit logs and metrics, the controller and the CLI alike (the Kubernetes
#: client's default names only its code generator).
USER_AGENT = f"multikueue/{__version__}"
