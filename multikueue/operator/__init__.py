"""The controller process: start-up, wiring, the scheduling loop, the webhook server.

:mod:`.app` reads the options and the configuration and runs kopf;
:mod:`.wiring` builds every part with what it uses and connects them;
:mod:`.feeds` keeps the core cache current from watches; :mod:`.scheduling`
runs the scheduler and writes its decisions; :mod:`.webhook` serves the
integrations' webhooks; :mod:`.login` hands kopf the controller's client.
"""
