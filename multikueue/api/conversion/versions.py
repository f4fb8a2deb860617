"""The two served versions of the group."""

from __future__ import annotations

from multikueue.api.constants import GROUP, VERSION

#: The storage version, the one the controller reads and writes (upstream's conversion hub).
HUB = VERSION
#: The older version, served through conversion only.
SPOKE = "v1beta1"
#: Both, as ``apiVersion`` strings.
VERSIONS = (f"{GROUP}/{SPOKE}", f"{GROUP}/{HUB}")
