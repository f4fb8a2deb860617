"""Job integrations: how a job becomes a Workload, and how it is started and stopped.

Everything here is pure logic over plain dicts as the API server returns them
(no I/O, no Kubernetes client, no asyncio). The kopf layer watches Jobs and
Workloads, calls these functions and applies what they return.

- :mod:`multikueue.integrations.naming`: upstream's Workload naming scheme
  (``job-<name>-<hash>``), so our Workload names equal upstream Kueue's.
- :mod:`multikueue.integrations.batchjob.job`: the ``batch/v1`` Job as Kueue sees it:
  queue name, pod sets, the Workload built for it, whether that Workload still
  matches, and its ``Finished`` condition.
- :mod:`multikueue.integrations.batchjob.startstop`: the patches that start a Job on
  its admission and stop it on eviction.
- :mod:`multikueue.integrations.batchjob.remote`: the copy MultiKueue creates on a
  worker and the status it brings back to the manager.
- :mod:`multikueue.integrations.batchjob.webhook`: the mutating (suspend, ``managedBy``) and
  validating admission webhook logic for Jobs.
"""
