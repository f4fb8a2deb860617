"""Tools the controllers use: the API client, informer, work queue, Workload and queue status writers, Events, kubeconfig validation, certificates, logging and metrics.

Nothing here decides anything about Kueue; each tool does one kind of I/O
the same way for every controller.
"""
