"""Adapters: how MultiKueue creates, watches and deletes one kind of job on a worker."""
