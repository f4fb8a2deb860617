"""Development tooling: local Kubernetes control planes for demos and tests."""
