"""The ``batch/v1`` Job integration: how a Job becomes a Workload, starts, stops and travels.

The pure modules work on plain dicts as the API server returns them (no
Kubernetes client, no kopf, checked by the import contracts):

- :mod:`.job`: the Job as Kueue sees it: queue name, pod sets, the Workload
  built for it (named as upstream does, :mod:`multikueue.integrations.naming`),
  whether that Workload still matches, and its ``Finished`` condition;
- :mod:`.decide`: what to do with a Job given its Workload;
- :mod:`.startstop`: the patches that start a Job on admission and stop it
  on eviction;
- :mod:`.remote`: the copy MultiKueue creates on a worker and the status it
  brings back; :mod:`.adapter`: those answers behind the integration
  interface.

The I/O: :mod:`.reconciler` (a kopf handler applying :mod:`.decide`) and
:mod:`.webhook` (the mutating and validating rules, served through kopf).
"""
