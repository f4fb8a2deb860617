"""The ``multikueue`` command line (also installed as ``kubectl-multikueue``)."""
