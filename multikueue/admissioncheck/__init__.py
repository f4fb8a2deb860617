"""The MultiKueue admission check: worker clusters, remote clients, dispatcher, GC."""
