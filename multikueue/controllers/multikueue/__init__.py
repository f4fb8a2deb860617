"""The MultiKueue admission check on the manager.

- :mod:`.dispatch`: the pure decision (which workers get copies, who wins,
  when to retry, finish, clean up), returning a typed plan;
- :mod:`.workloads`: the reconciler that builds the decision's context and
  runs it per Workload, on a work queue;
- :mod:`.apply`: carrying out a plan (the local commit point, remote copy
  creation and deletion, status sync);
- :mod:`.clusters` and :mod:`.connection`: worker connections from
  kubeconfig Secrets and the ``Active`` conditions of MultiKueueClusters and
  AdmissionChecks; :mod:`.checks`: when a check is active;
- :mod:`.remote_workload`: the Workload copy sent to a worker;
- :mod:`.gc`: removal of remote leftovers.
"""
