"""Controllers that are not about one job kind.

- :mod:`.lifecycle`: the Workload transitions (Admitted, Retry, Rejected,
  the in-use finalizer) and the fan-out of Workload changes;
- :mod:`.multikueue`: the MultiKueue admission check on the manager.
"""
