#!/usr/bin/python3
"""Checks the container files offline (no Docker daemon needed).

compose.yaml: parses as YAML; only keys the Compose specification knows;
the coordinator keeps its database (--db) on a declared named volume and
publishes its --listen port; every worker dials the coordinator service on
that port under a name of its own; every build names a Dockerfile that
exists.

*.Dockerfile: known instructions only; every stage a COPY --from names
exists; COPY sources exist in the build context (less its .dockerignore);
exec-form ENTRYPOINT, CMD and HEALTHCHECK are valid JSON arrays; each
image's entrypoint binary is one its build stage copies out of bazel-bin.

Usage: check_container.py [DIR]   (default: this file's folder)
Exit: 0 pass, 1 fail.
"""

import fnmatch
import json
import os
import re
import sys

import yaml

COMPOSE_TOP = {"name", "version", "services", "volumes", "networks",
               "secrets", "configs", "include"}
COMPOSE_SERVICE = {
    "build", "image", "command", "entrypoint", "environment", "env_file",
    "ports", "expose", "volumes", "depends_on", "restart", "healthcheck",
    "stop_signal", "stop_grace_period", "deploy", "profiles", "secrets",
    "configs", "labels", "networks", "user", "working_dir", "devices",
    "cap_add", "cap_drop", "read_only", "tmpfs", "ulimits", "logging",
    "init", "hostname", "container_name", "pull_policy", "security_opt",
    "extra_hosts", "runtime", "shm_size", "gpus"}
DOCKERFILE_INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY",
    "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD",
    "STOPSIGNAL", "HEALTHCHECK", "SHELL"}

errors = []


def error(where, message):
    errors.append(f"{where}: {message}")


def flag_value(args, name):
    for a in args or []:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def check_compose(path):
    with open(path) as f:
        doc = yaml.safe_load(f)
    where = os.path.basename(path)
    for key in doc:
        if key not in COMPOSE_TOP and not key.startswith("x-"):
            error(where, f"unknown top-level key {key!r}")
    services = doc.get("services") or {}
    volumes = doc.get("volumes") or {}
    for name, svc in services.items():
        for key in svc:
            if key not in COMPOSE_SERVICE and not key.startswith("x-"):
                error(f"{where}: services.{name}", f"unknown key {key!r}")
        if not isinstance(svc.get("command", []), list):
            error(f"{where}: services.{name}.command", "must be a list")
        build = svc.get("build")
        if build:
            context = os.path.normpath(
                os.path.join(os.path.dirname(path), build.get("context", ".")))
            dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
            if not os.path.isdir(context):
                error(f"{where}: services.{name}.build.context",
                      f"{context} is not a folder")
            if not os.path.isfile(dockerfile):
                error(f"{where}: services.{name}.build.dockerfile",
                      f"{dockerfile} does not exist")
        for v in svc.get("volumes", []) or []:
            source = v.split(":")[0] if isinstance(v, str) else v.get("source")
            if source and not source.startswith((".", "/")) and source not in volumes:
                error(f"{where}: services.{name}.volumes",
                      f"named volume {source!r} is not declared under volumes")

    coordinator = services.get("coordinator")
    if coordinator is None:
        error(where, "no coordinator service")
        return
    args = coordinator.get("command") or []
    db = flag_value(args, "db")
    listen = flag_value(args, "listen")
    mounts = {}
    for v in coordinator.get("volumes", []) or []:
        if isinstance(v, str) and ":" in v:
            source, target = v.split(":")[:2]
            mounts[target] = source
    if not db:
        error(f"{where}: services.coordinator.command", "no --db")
    elif not any(db.startswith(t + "/") and m in volumes
                 for t, m in mounts.items()):
        error(f"{where}: services.coordinator.command",
              f"--db={db} is not on a named volume")
    port = listen.rsplit(":", 1)[1] if listen else "7070"
    published = [str(p).split(":")[-1] for p in coordinator.get("ports", [])]
    if port not in published:
        error(f"{where}: services.coordinator.ports",
              f"the gRPC port {port} is not published")

    workers = [n for n in services if n.startswith("worker")]
    cpu_workers = [n for n in workers
                   if "gpu" not in (services[n].get("profiles") or [])]
    if len(cpu_workers) < 2:
        error(where, f"expected at least 2 CPU workers, found {cpu_workers}")
    names = {}
    for n in workers:
        wargs = services[n].get("command") or []
        target = flag_value(wargs, "coordinator")
        if target != f"coordinator:{port}":
            error(f"{where}: services.{n}.command",
                  f"--coordinator={target}, expected coordinator:{port}")
        wname = flag_value(wargs, "name")
        if not wname:
            error(f"{where}: services.{n}.command", "no --name")
        elif wname in names:
            error(f"{where}: services.{n}.command",
                  f"--name={wname} is also {names[wname]}'s")
        names[wname] = n
        if "coordinator" not in (services[n].get("depends_on") or {}):
            error(f"{where}: services.{n}", "does not depend on the coordinator")


def dockerfile_instructions(path):
    """Yields (line number, instruction, arguments), continuations joined."""
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        start = i + 1
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.rstrip().endswith("\\") and i < len(lines):
            line = line.rstrip()[:-1] + " "
            nxt = lines[i]
            i += 1
            if nxt.lstrip().startswith("#"):
                continue
            line += nxt.strip()
        parts = line.strip().split(None, 1)
        yield start, parts[0], parts[1] if len(parts) > 1 else ""


def ignored(relpath, patterns):
    for p in patterns:
        p = p.rstrip("/")
        if fnmatch.fnmatch(relpath, p) or fnmatch.fnmatch(
            relpath.split("/")[0], p):
            return True
    return False


def check_dockerfile(path, context):
    where = os.path.basename(path)
    ignore_file = path + ".dockerignore"
    patterns = []
    if not os.path.isfile(ignore_file):
        error(where, f"no {os.path.basename(ignore_file)} beside it")
    else:
        with open(ignore_file) as f:
            patterns = [l.strip() for l in f
                        if l.strip() and not l.startswith("#")]
    stages = []
    copied_out = set()
    final = {}
    for line, inst, args in dockerfile_instructions(path):
        at = f"{where}:{line}"
        if inst.upper() != inst or inst not in DOCKERFILE_INSTRUCTIONS:
            error(at, f"unknown instruction {inst!r}")
            continue
        if inst == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?$", args, re.IGNORECASE)
            if not m:
                error(at, f"FROM {args!r} does not parse")
                continue
            stages.append(m.group(2) or str(len(stages)))
            final = {}
        elif inst == "COPY":
            words = args.split()
            opts = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            src = [o.split("=", 1)[1] for o in opts if o.startswith("--from=")]
            if src and src[0] not in stages:
                error(at, f"COPY --from={src[0]}: no such stage before it")
            if not src:
                for p in paths[:-1]:
                    full = os.path.join(context, p)
                    if not os.path.exists(full):
                        error(at, f"COPY source {p} is not in the build context")
                    elif p not in (".", "./") and ignored(p.rstrip("/"), patterns):
                        error(at, f"COPY source {p} is excluded by the .dockerignore")
        elif inst == "RUN":
            for b in re.findall(r"bazel-bin/\S+/([\w-]+)", args):
                copied_out.add(b)
        elif inst in ("ENTRYPOINT", "CMD"):
            try:
                value = json.loads(args)
                if not isinstance(value, list) or not all(
                    isinstance(v, str) for v in value):
                    raise ValueError("not a list of strings")
                final[inst] = value
            except ValueError as e:
                error(at, f"{inst} is not an exec-form JSON array: {e}")
        elif inst == "HEALTHCHECK":
            m = re.search(r"\bCMD\s+(\[.*\])\s*$", args)
            if not m:
                error(at, "HEALTHCHECK without an exec-form CMD")
            else:
                try:
                    json.loads(m.group(1))
                except ValueError as e:
                    error(at, f"HEALTHCHECK CMD is not JSON: {e}")
    entry = final.get("ENTRYPOINT")
    if not entry:
        error(where, "the final stage has no ENTRYPOINT")
    elif os.path.basename(entry[0]) not in copied_out:
        error(where, f"ENTRYPOINT {entry[0]} is not a binary the build copies "
              f"out of bazel-bin ({sorted(copied_out)})")


def main():
    here = os.path.abspath(sys.argv[1] if len(sys.argv) > 1
                           else os.path.dirname(__file__))
    context = os.path.normpath(os.path.join(here, "../.."))
    check_compose(os.path.join(here, "compose.yaml"))
    dockerfiles = sorted(f for f in os.listdir(here) if f.endswith(".Dockerfile"))
    for f in dockerfiles:
        check_dockerfile(os.path.join(here, f), context)
    for e in errors:
        print(f"container: {e}")
    if errors:
        return 1
    print(f"container: compose.yaml and {len(dockerfiles)} Dockerfiles ok "
          f"({', '.join(dockerfiles)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
