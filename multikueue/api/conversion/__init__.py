"""Conversion between ``kueue.x-k8s.io/v1beta1`` and ``v1beta2``, and ConversionReviews.

Pure functions on objects as dicts (what the apiserver sends a conversion
webhook): :func:`convert` turns an object of either version into the other
with upstream Kueue's semantics (:mod:`.kinds`) and, beyond upstream, keeps
what the target version cannot say in an annotation so that converting back
gives the original (:mod:`.stash`). :func:`review` answers a
``apiextensions.k8s.io/v1`` ConversionReview; the controller's webhook
server (``multikueue.operator.webhook``) serves it at ``/convert``.
:mod:`.schema` says how the v1beta1 schema differs, for the CRD generator.
"""

from __future__ import annotations

from multikueue.api.conversion.kinds import CONVERTERS, ConversionError
from multikueue.api.conversion.review import convert, review
from multikueue.api.conversion.stash import ANNOTATION
from multikueue.api.conversion.versions import HUB, SPOKE, VERSIONS

__all__ = ["ANNOTATION", "CONVERTERS", "HUB", "SPOKE", "VERSIONS", "ConversionError", "convert", "review"]
