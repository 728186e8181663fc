#!/usr/bin/python3
"""Validates the Kubernetes manifests offline against the API's own schema.

Each YAML document is walked against the model class of the official Python
client (python3-kubernetes) for its apiVersion and kind: every field must be
one the API defines (a misspelling is an error, with the nearest field
named), every value must have the field's type (str, int, bool, list,
map, nested object), and every required field must be set (the model
constructors, with client-side validation on, refuse a required field that
is None, and enumerated values that are not allowed). Errors name the file,
the document and the field path, e.g.
  coordinator.yaml[2] StatefulSet/lockstep-coordinator: spec.replicas:
  expected int, got str '1'

Then cross-references: a Service selects the pods of a workload, a
StatefulSet's serviceName is a headless Service, probes and Service
targetPorts name container ports, and mounted Secrets exist.

Last, a negative control: a copy of the coordinator StatefulSet with a
misspelled field and one with a wrongly typed field must both be rejected
with their paths named.

Must run under /usr/bin/python3 (Debian's python3-kubernetes).
Usage: validate_manifests.py [DIR]   Exit: 0 pass, 1 fail.
"""

import copy
import difflib
import os
import re
import sys

import yaml

try:
    from kubernetes.client import Configuration
    from kubernetes.client import models
except ImportError:
    print("k8s: SKIP: the kubernetes Python client is missing "
          "(Debian package python3-kubernetes, under /usr/bin/python3)")
    sys.exit(77)

CONFIG = Configuration()
CONFIG.client_side_validation = True


def model_for(api_version, kind):
    """V1StatefulSet for (apps/v1, StatefulSet), V1Service for (v1, Service)."""
    version = api_version.split("/")[-1]
    name = version[0].upper() + version[1:] + kind
    return getattr(models, name, None)


class Validator:
    def __init__(self):
        self.errors = []

    def error(self, path, message):
        self.errors.append(f"{path}: {message}")

    def check(self, value, type_name, path):
        """Checks value against an openapi type string."""
        if value is None:
            return
        m = re.fullmatch(r"list\[(.+)\]", type_name)
        if m:
            if not isinstance(value, list):
                self.error(path, f"expected a list, got {type(value).__name__}")
                return
            for i, item in enumerate(value):
                self.check(item, m.group(1), f"{path}[{i}]")
            return
        m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
        if m:
            if not isinstance(value, dict):
                self.error(path, f"expected a map, got {type(value).__name__}")
                return
            for k, v in value.items():
                if not isinstance(k, str):
                    self.error(path, f"key {k!r} is not a string")
                self.check(v, m.group(1), f"{path}.{k}")
            return
        scalar = {
            "str": (str,), "int": (int,), "bool": (bool,), "float": (int, float),
            "datetime": (str,), "date": (str,), "object": None}
        if type_name in scalar:
            want = scalar[type_name]
            if want is None:
                return  # IntOrString and free-form objects.
            if (not isinstance(value, want)
                or (type_name != "bool" and isinstance(value, bool))):
                self.error(path, f"expected {type_name}, got "
                           f"{type(value).__name__} {value!r}")
            return
        cls = getattr(models, type_name, None)
        if cls is None:
            self.error(path, f"no model class {type_name}")
            return
        self.check_object(value, cls, path)

    def check_object(self, value, cls, path):
        if not isinstance(value, dict):
            self.error(path, f"expected an object ({cls.__name__}), got "
                       f"{type(value).__name__} {value!r}")
            return
        by_key = {key: attr for attr, key in cls.attribute_map.items()}
        kwargs = {}
        for key, v in value.items():
            here = f"{path}.{key}" if path else key
            attr = by_key.get(key)
            if attr is None:
                near = difflib.get_close_matches(key, list(by_key), n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                self.error(here, f"unknown field in {cls.__name__}{hint}")
                continue
            self.check(v, cls.openapi_types[attr], here)
            kwargs[attr] = v
        try:
            cls(local_vars_configuration=CONFIG, **kwargs)
        except ValueError as e:
            self.error(path or "(top)", f"{cls.__name__}: {e}")
        except TypeError:
            pass  # A nested value of the wrong type, reported above.


def load(directory):
    docs = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(directory, name)) as f:
            for i, doc in enumerate(yaml.safe_load_all(f)):
                if doc is not None:
                    docs.append((f"{name}[{i}]", doc))
    return docs


def validate(where, doc):
    v = Validator()
    kind, api = doc.get("kind"), doc.get("apiVersion")
    name = (doc.get("metadata") or {}).get("name", "?")
    label = f"{where} {kind}/{name}"
    cls = model_for(api or "", kind or "") if api and kind else None
    if cls is None:
        return [f"{label}: unknown apiVersion/kind {api}/{kind}"]
    v.check_object(doc, cls, "")
    return [f"{label}: {e}" for e in v.errors]


def pod_spec(doc):
    spec = doc.get("spec") or {}
    return ((spec.get("template") or {}).get("spec")) if "template" in spec \
        else None


def cross_check(docs):
    errors = []
    by_kind = {}
    for where, d in docs:
        by_kind.setdefault(d.get("kind"), []).append((where, d))
    secrets = {d["metadata"]["name"] for _, d in by_kind.get("Secret", [])}
    services = {d["metadata"]["name"]: d for _, d in by_kind.get("Service", [])}
    workloads = [(w, d) for w, d in docs if pod_spec(d) is not None]
    for where, d in workloads:
        label = f"{where} {d['kind']}/{d['metadata']['name']}"
        spec = d["spec"]
        pod_labels = spec["template"]["metadata"].get("labels", {})
        for k, val in (spec["selector"].get("matchLabels") or {}).items():
            if pod_labels.get(k) != val:
                errors.append(f"{label}: spec.selector.matchLabels.{k}={val} does "
                              "not match the pod template's labels")
        ps = pod_spec(d)
        for i, vol in enumerate(ps.get("volumes") or []):
            s = (vol.get("secret") or {}).get("secretName")
            if s and s not in secrets:
                errors.append(f"{label}: spec.template.spec.volumes[{i}]: Secret "
                              f"{s!r} is not defined")
        for ci, c in enumerate(ps.get("containers") or []):
            port_names = {p.get("name") for p in c.get("ports") or []}
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
                if isinstance(port, str) and port not in port_names:
                    errors.append(f"{label}: spec.template.spec.containers[{ci}]."
                                  f"{probe}.httpGet.port: no container port {port!r}")
            mounts = {m["name"] for m in c.get("volumeMounts") or []}
            known = {vol["name"] for vol in ps.get("volumes") or []} | {
                t["metadata"]["name"] for t in spec.get("volumeClaimTemplates") or []}
            for m in sorted(mounts - known):
                errors.append(f"{label}: spec.template.spec.containers[{ci}]."
                              f"volumeMounts: no volume {m!r}")
        if d["kind"] == "StatefulSet":
            svc = services.get(spec.get("serviceName"))
            if svc is None or svc["spec"].get("clusterIP") != "None":
                errors.append(f"{label}: spec.serviceName "
                              f"{spec.get('serviceName')!r} is not a headless Service")
    for name, svc in services.items():
        sel = svc["spec"].get("selector") or {}
        targets = [d for _, d in workloads
                   if all(d["spec"]["template"]["metadata"].get("labels", {})
                          .get(k) == v for k, v in sel.items())]
        if not targets:
            errors.append(f"Service/{name}: spec.selector {sel} selects no pods")
        for p in svc["spec"].get("ports") or []:
            t = p.get("targetPort")
            if isinstance(t, str) and not any(
                t in {cp.get("name") for c in pod_spec(d)["containers"]
                      for cp in c.get("ports") or []} for d in targets):
                errors.append(f"Service/{name}: spec.ports.{p.get('name')}: "
                              f"targetPort {t!r} names no container port")
    return errors


def negative_control(docs):
    """The validator must reject a misspelling and a wrong type."""
    base = next(d for _, d in docs if d.get("kind") == "StatefulSet")
    problems = []
    typo = copy.deepcopy(base)
    c = typo["spec"]["template"]["spec"]["containers"][0]
    c["imagePullPolcy"] = c.pop("imagePullPolicy", "IfNotPresent")
    errs = validate("typo", typo)
    if not any("spec.template.spec.containers[0].imagePullPolcy: unknown field"
               in e and "imagePullPolicy" in e for e in errs):
        problems.append(f"a misspelled field was not caught: {errs}")
    wrong = copy.deepcopy(base)
    wrong["spec"]["replicas"] = "1"
    errs = validate("type", wrong)
    if not any("spec.replicas: expected int, got str" in e for e in errs):
        problems.append(f"a string replicas was not caught: {errs}")
    missing = copy.deepcopy(base)
    del missing["spec"]["template"]["spec"]["containers"][0]["name"]
    errs = validate("required", missing)
    if not any("spec.template.spec.containers[0]" in e and "`name`" in e
               for e in errs):
        problems.append(f"a missing required field was not caught: {errs}")
    return problems


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.abspath(__file__))
    docs = load(directory)
    errors = []
    for where, doc in docs:
        errors += validate(where, doc)
    if not errors:
        errors += cross_check(docs)
    for e in errors:
        print(f"k8s: {e}")
    problems = negative_control(docs)
    for p in problems:
        print(f"k8s: negative control: {p}")
    if errors or problems:
        return 1
    kinds = ", ".join(f"{d['kind']}/{d['metadata']['name']}" for _, d in docs)
    print(f"k8s: {len(docs)} documents valid: {kinds}")
    print("k8s: a misspelled field, a wrong type and a missing required field "
          "are rejected (as they must be)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
