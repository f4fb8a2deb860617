"""External frameworks: any kind listed in ``multiKueue.externalFrameworks``.

:mod:`.entries` checks and compiles the entries (JSONPath in :mod:`.jsonpath`,
CEL in :mod:`.cel`); :mod:`.adapter` is the generic adapter MultiKueue uses
for them; :mod:`.workload` decides what to do with an object (create or finish
its Workload, release a worker copy's hold); :mod:`.reconciler` watches each
kind and applies those decisions; :mod:`.reload` follows the ConfigMap live.
"""
