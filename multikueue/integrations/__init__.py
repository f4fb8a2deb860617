"""Integrations: one folder per job kind, behind one interface.

Each kind (``batchjob/`` for ``batch/v1`` Jobs, ``external/`` for the kinds
listed in the ConfigMap) holds its pure logic (how its objects become
Workloads, are started, stopped, copied to a worker and brought back), its
adapter (the answers MultiKueue asks for, :mod:`.base`), its reconciler (the
watch and the writes) and, where it has one, its webhook. What every kind
shares sits here: the interface (:mod:`.base`), the set of kinds and owner
lookup (:mod:`.registry`), how a copy names its prebuilt Workload
(:mod:`.binding`), upstream's Workload naming (:mod:`.naming`) and merge
patches (:mod:`.patch`). Integrations never import each other.
"""
