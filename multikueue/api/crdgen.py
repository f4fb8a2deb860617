"""Generate the CustomResourceDefinitions of ``kueue.x-k8s.io`` (v1beta2 and v1beta1) from the models.

The models are the single source of truth: this module walks their fields
and type annotations and writes one ``apiextensions.k8s.io/v1`` CRD per
kind, so the YAML in ``config/crd/bases`` can never drift from what the
Python code reads and writes. Facts pydantic has no notion of (list types,
CEL rules, int32 formats) come from :class:`~multikueue.api.schema.Schema`
markers on the fields.

Mapping rules, in short:

* ``str``/``int``/``bool`` -> string/integer/boolean; a ``StrEnum`` -> string
  with ``enum``; ``datetime`` -> string (the ``Time`` type adds ``date-time``);
* ``list[X]`` -> array of X; ``dict[str, X]`` -> object with
  ``additionalProperties`` X; ``dict[str, Any]`` -> an opaque object with
  ``x-kubernetes-preserve-unknown-fields`` (pod templates);
* a model -> object with ``properties``; a field is ``required`` when pydantic
  requires it, unless its marker says otherwise; ``X | None`` is optional;
* a field's scalar Python default becomes its CRD default (object defaults
  such as ``{}`` are given with ``Schema(default=...)``);
* quantities are int-or-string (``anyOf`` integer/string).

Each CRD serves v1beta2 (stored) and, for upstream's manifests, v1beta1,
whose schema is v1beta2's with the edits of
:mod:`multikueue.api.conversion.schema` applied. Kinds whose versions differ
convert through the controller's webhook (``spec.conversion``, pointing at
the Service of ``config/default``; the controller points it at itself and
fills in the ``caBundle`` when its webhook server starts).

Run ``python -m multikueue.api.crdgen [--check] [--dir config/crd]``
(the CLI's ``multikueue crds generate`` does the same).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from multikueue.api import KINDS
from multikueue.api.constants import GROUP, VERSION
from multikueue.api.conversion import CONVERTERS, SPOKE
from multikueue.api.conversion.schema import (
    DEPRECATION_WARNING,
    EDITS,
    Add,
    Edit,
    ExtraValues,
    Remove,
    Rename,
    Required,
    Rules,
)
from multikueue.api.meta import KueueObject
from multikueue.api.quantity import quantity_json
from multikueue.api.schema import UNSET, Schema, merge_schemas

__all__ = [
    "CRD_DIR",
    "KUSTOMIZATION",
    "REGENERATE_COMMAND",
    "PrinterColumn",
    "CONVERSION_PATH",
    "CONVERSION_SERVICE",
    "check_crds",
    "conversion_stanza",
    "crd_document",
    "crd_documents",
    "crd_file_name",
    "generate_crds",
    "generate_files",
    "main",
    "openapi_schema",
    "v1beta1_schema",
    "write_crds",
]

#: The command that regenerates the files, named in their header and in errors.
REGENERATE_COMMAND = "multikueue crds generate"
#: Where the generated files live, relative to the repository root: the CRDs in ``bases/``, so that
#: ``kubectl apply -f config/crd/bases/`` applies them as they are, and beside that folder the
#: ``kustomization.yaml`` listing them for ``-k`` and the install bases.
CRD_DIR = Path("config/crd")
#: The folder of the CRDs, inside :data:`CRD_DIR`.
BASES = "bases"
#: The kustomization listing the generated CRDs.
KUSTOMIZATION = "kustomization.yaml"

#: The webhook path the API server posts ConversionReviews to.
CONVERSION_PATH = "/convert"
#: (namespace, name, port) of the Service ``config/default`` puts in front of the controller's webhooks.
CONVERSION_SERVICE = ("kueue-system", "multikueue-webhook-service", 443)

_HEADER = (
    f"# Generated from the pydantic models in multikueue/api by `{REGENERATE_COMMAND}`.\n"
    "# Do not edit: change the models and regenerate.\n"
)


@dataclass(frozen=True)
class PrinterColumn:
    """A column ``kubectl get`` shows for a kind."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0

    def as_dict(self) -> dict[str, Any]:
        column: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            column["priority"] = self.priority
        return column


_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation")

#: ``kubectl get`` columns per kind, the same as upstream's.
PRINTER_COLUMNS: dict[str, tuple[PrinterColumn, ...]] = {
    "ClusterQueue": (
        PrinterColumn("Cohort", "string", ".spec.cohortName", "Cohort the queue borrows from and lends to"),
        PrinterColumn("Strategy", "string", ".spec.queueingStrategy", "Queueing strategy", priority=1),
        PrinterColumn("Pending Workloads", "integer", ".status.pendingWorkloads", "Workloads waiting for quota"),
        PrinterColumn(
            "Admitted Workloads", "integer", ".status.admittedWorkloads", "Admitted, unfinished workloads", priority=1
        ),
    ),
    "LocalQueue": (
        PrinterColumn("ClusterQueue", "string", ".spec.clusterQueue", "ClusterQueue behind this queue"),
        PrinterColumn("Pending Workloads", "integer", ".status.pendingWorkloads", "Workloads waiting for quota"),
        PrinterColumn("Admitted Workloads", "integer", ".status.admittedWorkloads", "Admitted, unfinished workloads"),
    ),
    "MultiKueueCluster": (
        PrinterColumn(
            "Connected", "string", ".status.conditions[?(@.type=='Active')].status", "Whether the worker is reachable"
        ),
        _AGE,
    ),
    "Workload": (
        PrinterColumn("Queue", "string", ".spec.queueName", "LocalQueue the workload was submitted to"),
        PrinterColumn("Reserved in", "string", ".status.admission.clusterQueue", "ClusterQueue holding its quota"),
        PrinterColumn(
            "Admitted", "string", ".status.conditions[?(@.type=='Admitted')].status", "Whether it is admitted"
        ),
        PrinterColumn("Finished", "string", ".status.conditions[?(@.type=='Finished')].status", "Whether it finished"),
        _AGE,
    ),
    "WorkloadPriorityClass": (
        PrinterColumn("Value", "integer", ".value", "Priority given to workloads of this class"),
    ),
}


# --- model -> OpenAPI --------------------------------------------------------


def _unwrap(annotation: Any) -> tuple[Any, list[Schema]]:
    """Strip ``Annotated`` and ``| None``, collecting markers innermost first."""
    markers: list[Schema] = []
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            base, *metadata = get_args(annotation)
            markers = [item for item in metadata if isinstance(item, Schema)] + markers
            annotation = base
        elif origin is Union or origin is types.UnionType:
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                raise TypeError(f"unions other than `X | None` have no structural schema: {annotation!r}")
            annotation = members[0]
        else:
            return annotation, markers


def _add_keywords(node: dict[str, Any], keywords: dict[str, Any]) -> None:
    """Add a marker's keywords to a node; CEL rules of the type and of the field accumulate."""
    for key, value in keywords.items():
        if key == "x-kubernetes-validations" and key in node:
            node[key] = node[key] + value
        else:
            node[key] = value


def _first_line(doc: str | None) -> str | None:
    if not doc:
        return None
    line = doc.strip().splitlines()[0].strip()
    return line.replace("``", "") or None


def _model_summary(annotation: Any) -> str | None:
    """For a field holding a model, the model's one-line summary (used as the field description)."""
    bare, _ = _unwrap(annotation)
    if isinstance(bare, type) and issubclass(bare, BaseModel):
        return _first_line(bare.__doc__)
    return None


def _base_node(annotation: Any, marker: Schema, where: str) -> dict[str, Any]:
    """The schema of a bare type (no ``Annotated``, no ``None``)."""
    if marker.int_or_string:
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    origin = get_origin(annotation)
    if origin is list:
        (item,) = get_args(annotation)
        return {"type": "array", "items": _schema_for_type(item, [], f"{where}[]")[0]}
    if origin is dict:
        key, value = get_args(annotation)
        if key is not str:
            raise TypeError(f"{where}: map keys must be strings, got {key!r}")
        if value is Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": _schema_for_type(value, [], f"{where}{{}}")[0]}
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return _schema_for_model(annotation, where)
        if issubclass(annotation, Enum):
            return {"type": "string", "enum": [member.value for member in annotation]}
        if annotation is bool:
            return {"type": "boolean"}
        if annotation is int:
            return {"type": "integer"}
        if annotation is str or issubclass(annotation, datetime):
            return {"type": "string"}
    raise TypeError(f"{where}: no OpenAPI mapping for {annotation!r}")


def _schema_for_type(annotation: Any, markers: list[Schema], where: str) -> tuple[dict[str, Any], Schema]:
    """The schema node of a (possibly annotated, possibly optional) type, and its merged marker."""
    bare, inner = _unwrap(annotation)
    marker = merge_schemas(inner + markers)
    node = _base_node(bare, marker, where)
    _add_keywords(node, marker.openapi())
    return node, marker


def _json_value(value: Any) -> Any:
    """A Python default as it appears in JSON."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Decimal):
        return quantity_json(value)
    if isinstance(value, (bool, int, str, float)):
        return value
    raise TypeError(f"default {value!r} has no JSON form; give Schema(default=...) instead")


def _default_of(info: FieldInfo, marker: Schema) -> Any:
    """The CRD default of a field: an explicit marker default, else a scalar Python default."""
    if marker.default is not UNSET:
        return marker.default
    if info.default is PydanticUndefined or info.default is None:
        return UNSET
    return _json_value(info.default)


def _schema_for_model(model: type[BaseModel], where: str) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "object"}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        alias = info.alias or name
        field_markers = [item for item in info.metadata if isinstance(item, Schema)]
        prop, marker = _schema_for_type(info.annotation, field_markers, f"{where}.{alias}")
        is_required = marker.required if marker.required is not None else info.is_required()
        if is_required:
            required.append(alias)
        else:
            default = _default_of(info, marker)
            if default is not UNSET:
                prop["default"] = default
        description = info.description or _model_summary(info.annotation)
        if description and "description" not in prop:
            prop["description"] = description
        properties[alias] = prop
    if properties:
        node["properties"] = dict(sorted(properties.items()))
    if required:
        node["required"] = sorted(required)
    rules = getattr(model, "crd_rules", ())
    if rules:
        _add_keywords(node, Schema(rules=tuple(rules)).openapi())
    return node


def openapi_schema(model: type[KueueObject]) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of a top-level kind.

    ``metadata`` is left to the API server (``type: object``), as for every CRD.
    """
    node = _schema_for_model(model, "")
    properties = node["properties"]
    properties["apiVersion"] = {"type": "string", "description": "Versioned schema of this object"}
    properties["kind"] = {"type": "string", "description": "Kind of this object"}
    properties["metadata"] = {"type": "object"}
    node["properties"] = dict(sorted(properties.items()))
    description = _first_line(model.__doc__)
    if description:
        node["description"] = description
    return node


# --- v1beta1: v1beta2 edited ---------------------------------------------------


class SchemaEditError(ValueError):
    """An edit of :mod:`multikueue.api.conversion.schema` does not fit the v1beta2 schema (a stale path)."""


def _node_at(root: dict[str, Any], path: str, edit: Edit) -> dict[str, Any]:
    node = root
    for part in [p for p in path.split(".") if p]:
        name, items = (part[:-2], True) if part.endswith("[]") else (part, False)
        try:
            node = node["properties"][name]
            if items:
                node = node["items"]
        except KeyError:
            raise SchemaEditError(f"{edit}: no {part!r} in the v1beta2 schema") from None
    return node


def _parent_and_name(root: dict[str, Any], edit: Edit) -> tuple[dict[str, Any], str]:
    parent, _, name = edit.path.rpartition(".")
    return _node_at(root, parent, edit), name


def _rename_in_rules(node: dict[str, Any], old: str, new: str) -> None:
    """CEL rules (and their messages) of a node whose property was renamed, speaking of the new name."""
    pattern = re.compile(rf"\b{re.escape(old)}\b")
    for rule in node.get("x-kubernetes-validations", []):
        rule["rule"] = pattern.sub(new, rule["rule"])
        rule["message"] = pattern.sub(new, rule["message"])


def _apply_edit(root: dict[str, Any], edit: Edit) -> None:
    if isinstance(edit, Rename):
        parent, name = _parent_and_name(root, edit)
        properties = parent.get("properties", {})
        if name not in properties:
            raise SchemaEditError(f"{edit}: no {name!r} to rename")
        properties[edit.name] = properties.pop(name)
        parent["properties"] = dict(sorted(properties.items()))
        if name in parent.get("required", []):
            parent["required"] = sorted(edit.name if r == name else r for r in parent["required"])
        _rename_in_rules(parent, name, edit.name)
    elif isinstance(edit, Remove):
        parent, name = _parent_and_name(root, edit)
        if parent.get("properties", {}).pop(name, None) is None:
            raise SchemaEditError(f"{edit}: no {name!r} to remove")
        if name in parent.get("required", []):
            parent["required"] = [r for r in parent["required"] if r != name]
            if not parent["required"]:
                del parent["required"]
    elif isinstance(edit, Add):
        parent, name = _parent_and_name(root, edit)
        node, _ = _schema_for_type(edit.annotation, [], edit.path)
        node.setdefault("description", edit.description)
        parent["properties"] = dict(sorted({**parent.get("properties", {}), name: node}.items()))
    elif isinstance(edit, ExtraValues):
        node = _node_at(root, edit.path, edit)
        node["enum"] = [*node["enum"], *edit.values]
    elif isinstance(edit, Required):
        node = _node_at(root, edit.path, edit)
        node["required"] = sorted(edit.names)
    elif isinstance(edit, Rules):
        node = _node_at(root, edit.path, edit)
        kept = [r for r in node.get("x-kubernetes-validations", []) if not any(w in r["rule"] for w in edit.drop)]
        kept += [{"rule": r.rule, "message": r.message} for r in edit.add]
        if kept:
            node["x-kubernetes-validations"] = kept
        else:
            node.pop("x-kubernetes-validations", None)
    else:  # pragma: no cover - a new edit type without a case here
        raise SchemaEditError(f"unknown edit {edit!r}")


def v1beta1_schema(model: type[KueueObject]) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of v1beta1: v1beta2's with the kind's edits applied."""
    root = copy.deepcopy(openapi_schema(model))
    for edit in EDITS.get(model.kind, ()):
        _apply_edit(root, edit)
    return root


def conversion_stanza(
    url: str | None = None,
    service: tuple[str, str, int] | None = CONVERSION_SERVICE,
    ca_bundle: str | None = None,
) -> dict[str, Any]:
    """``spec.conversion`` of a converted kind: the webhook at :data:`CONVERSION_PATH`, by URL or Service."""
    client_config: dict[str, Any]
    if url is not None:
        client_config = {"url": url.rstrip("/") + CONVERSION_PATH}
    else:
        assert service is not None
        namespace, name, port = service
        client_config = {"service": {"namespace": namespace, "name": name, "path": CONVERSION_PATH, "port": port}}
    if ca_bundle:
        client_config["caBundle"] = ca_bundle
    return {"strategy": "Webhook", "webhook": {"clientConfig": client_config, "conversionReviewVersions": ["v1"]}}


# --- CRD documents -----------------------------------------------------------


def crd_file_name(model: type[KueueObject]) -> str:
    """``kueue.x-k8s.io_<plural>.yaml``, upstream's file naming."""
    return f"{GROUP}_{model.plural}.yaml"


def crd_document(model: type[KueueObject]) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind, as a dict ready to apply."""
    names: dict[str, Any] = {
        "kind": model.kind,
        "listKind": f"{model.kind}List",
        "plural": model.plural,
        "singular": model.kind.lower(),
    }
    if model.short_names:
        names["shortNames"] = list(model.short_names)
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(model)},
    }
    old: dict[str, Any] = {
        "name": SPOKE,
        "served": True,
        "storage": False,
        "deprecated": True,
        "deprecationWarning": DEPRECATION_WARNING,
        "schema": {"openAPIV3Schema": v1beta1_schema(model)},
    }
    if "status" in model.model_fields:
        version["subresources"] = {"status": {}}
        old["subresources"] = {"status": {}}
    columns = PRINTER_COLUMNS.get(model.kind, ())
    if columns:
        version["additionalPrinterColumns"] = [column.as_dict() for column in columns]
        # A column showing a renamed field shows it under its v1beta1 name (ClusterQueue's Cohort).
        renames = {
            f".{e.path}": f".{e.path.rpartition('.')[0]}.{e.name}".replace("..", ".")
            for e in EDITS.get(model.kind, ())
            if isinstance(e, Rename)
        }
        old["additionalPrinterColumns"] = [
            {**column.as_dict(), "jsonPath": renames.get(column.json_path, column.json_path)} for column in columns
        ]
    spec: dict[str, Any] = {
        "group": GROUP,
        "names": names,
        "scope": "Namespaced" if model.namespaced else "Cluster",
        # v1beta2 first: readers that take the first version get the stored one.
        "versions": [version, old],
    }
    if model.kind in CONVERTERS:
        spec["conversion"] = conversion_stanza()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{model.plural}.{GROUP}"},
        "spec": spec,
    }


def crd_documents() -> dict[str, dict[str, Any]]:
    """Every kind's CRD as a dict, by file name (for applying with a client)."""
    return {crd_file_name(model): crd_document(model) for model in sorted(KINDS, key=lambda m: m.plural)}


def _to_yaml(document: dict[str, Any]) -> str:
    # Sorted keys and no line folding keep the output byte-stable and diffable.
    text: str = yaml.safe_dump(document, sort_keys=True, default_flow_style=False, width=4096)
    return _HEADER + text


def generate_crds() -> dict[str, str]:
    """Every kind's CRD as YAML text, by file name (``kueue.x-k8s.io_workloads.yaml`` ...)."""
    return {name: _to_yaml(document) for name, document in crd_documents().items()}


def generate_files() -> dict[str, str]:
    """Everything in ``config/crd``, by path relative to it: ``bases/<crd>.yaml`` and the ``kustomization.yaml``."""
    crds = {f"{BASES}/{name}": text for name, text in generate_crds().items()}
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(crds),
    }
    return {**crds, KUSTOMIZATION: _to_yaml(kustomization)}


def _ours(directory: Path) -> list[str]:
    """Files this generator owns under the output folder (relative paths), whether it would write them or not."""
    owned = [KUSTOMIZATION] if (directory / KUSTOMIZATION).is_file() else []
    bases = directory / BASES
    if bases.is_dir():
        owned += [
            f"{BASES}/{p.name}" for p in sorted(bases.iterdir())
            if p.is_file() and (p.name == KUSTOMIZATION or (p.name.startswith(f"{GROUP}_") and p.suffix == ".yaml"))
        ]  # fmt: skip
    return owned


def write_crds(directory: Path) -> list[Path]:
    """Write the generated files, removing files it owned that it no longer writes (a kind gone, an old layout)."""
    (directory / BASES).mkdir(parents=True, exist_ok=True)
    files = generate_files()
    for stale in _ours(directory):
        if stale not in files:
            (directory / stale).unlink()
    written = []
    for name, text in files.items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def check_crds(directory: Path) -> list[str]:
    """Paths (relative to ``directory``) that are missing, differ from the models, or should not be there."""
    files = generate_files()
    stale = []
    for name, text in files.items():
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    stale.extend(name for name in _ours(directory) if name not in files)
    return sorted(stale)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the CRDs, or with ``--check`` report (exit 1) when the committed ones are stale."""
    parser = argparse.ArgumentParser(
        prog="python -m multikueue.api.crdgen",
        description="Generate the kueue.x-k8s.io CRDs (v1beta2, and v1beta1 by conversion) from the models in multikueue/api.",
    )
    parser.add_argument("--check", action="store_true", help="do not write; fail if the files are out of date")
    parser.add_argument("--dir", type=Path, default=CRD_DIR, help=f"output folder (default: {CRD_DIR})")
    args = parser.parse_args(argv)
    directory: Path = args.dir
    if args.check:
        stale = check_crds(directory)
        if stale:
            print(
                f"CRDs in {directory} do not match the models in multikueue/api: {', '.join(stale)}\n"
                f"Regenerate them with `{REGENERATE_COMMAND}` "
                f"(or `python -m multikueue.api.crdgen --dir {directory}`) and commit the result.",
                file=sys.stderr,
            )
            return 1
        print(f"CRDs in {directory} are up to date.")
        return 0
    written = write_crds(directory)
    print(f"Wrote {len(written)} files to {directory}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
