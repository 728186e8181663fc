#!/usr/bin/env bash
# Checks every deployment method that can be checked on this machine:
#   systemd    systemd-analyze verify and security on the units
#   flags      every flag the deploy files and docs/deployment.md pass to a
#              Lockstep binary is one that binary defines (--helpfull)
#   container  the compose file and the Dockerfiles, offline
#   k8s        the manifests against the Kubernetes API schema, offline
#   slurm      the fleet-audit drill on a real local Slurm cluster
# One line per check: PASS, FAIL or SKIP (a tool it needs is missing), with
# its run time. Exits non-zero when any check failed.
#
# Usage: deploy/deploy_checks.sh [CHECK...]   (default: all five)
# Binaries: $LOCKSTEP_BIN_DIR (a bazel-bin tree), else they are built.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
deploy="${root}/deploy"
checks=("$@")
[[ "${#checks[@]}" -gt 0 ]] || checks=(systemd flags container k8s slurm)

if [[ -z "${LOCKSTEP_BIN_DIR:-}" ]]; then
  echo "deploy-checks: building lockstep-coordinator, lockstep-worker and lockstep"
  if ! (cd "${root}" && bazel build //server:lockstep-coordinator \
      //worker:lockstep-worker //client:lockstep); then
    echo "deploy-checks: FAIL: the build failed"
    exit 1
  fi
  LOCKSTEP_BIN_DIR="$(cd "${root}" && bazel info bazel-bin 2>/dev/null)"
fi
export LOCKSTEP_BIN_DIR
bin="${LOCKSTEP_BIN_DIR}"

# Debian's python3-kubernetes and python3-yaml live under /usr/bin/python3,
# whatever python3 comes first on PATH.
py=/usr/bin/python3
[[ -x "${py}" ]] || py="$(command -v python3 || true)"

# flag_scan HELP_DIR ROOT: checks the deploy files under ROOT against the
# --helpfull outputs in HELP_DIR.
flag_scan() {
  "${py}" - "$1" "$2" <<'PY'
"""Every flag handed to a Lockstep binary must be one it defines."""
import json, os, re, shlex, sys
import yaml

helps, root = sys.argv[1], sys.argv[2]
FLAGS = {}
for b in ("lockstep-coordinator", "lockstep-worker", "lockstep"):
    text = open(os.path.join(helps, b)).read()
    FLAGS[b] = set(re.findall(r"^    --(\w+) \(", text, re.M))
    if len(FLAGS[b]) < 5:
        sys.exit(f"flags: {b} --helpfull listed {len(FLAGS[b])} flags:\n{text}")
# Abseil's own: --help, --helpfull and friends.
ALL = set().union(*FLAGS.values()) | {
    "help", "helpfull", "helpshort", "helppackage", "version",
    "only_check_args"}
# Other tools' flags in these files (apt-get, useradd, docker, bazel,
# systemctl, systemd-analyze, kubectl, munged, Slurm's commands, timeout).
FOREIGN = set("""
from no-install-recommends partition uid time system shell now noheader
nodes home-dir from-file format states root output offline ntasks-per-node
job-name gres define build wait timeout threshold steps start-period socket
signal seed-file retries profile pid-file parsable log-file label
kill-on-bad-exit key-file jobs interval gpus foreground force exclusive
dry-run file
""".split())
errors, checked = [], {b: 0 for b in FLAGS}

def check(binary, tokens, where):
    for t in tokens:
        m = re.match(r"--([A-Za-z0-9_-]+)(=|$)", t)
        if not m:
            continue
        name = m.group(1)
        if name not in FLAGS[binary]:
            errors.append(f"{where}: {binary} has no flag --{name}")
        checked[binary] += 1

def binary_of(word):
    base = os.path.basename(word.strip("\"'${}"))
    return base if base in FLAGS else None

def rel(p):
    return os.path.relpath(p, root)

files = []
for sub in ("systemd", "container", "k8s", "slurm"):
    d = os.path.join(root, "deploy", sub)
    files += [os.path.join(d, f) for f in sorted(os.listdir(d))]
files += [os.path.join(root, "deploy", "deploy_checks.sh"),
          os.path.join(root, "docs", "deployment.md")]

for path in files:
    name = os.path.basename(path)
    if name.endswith(".service"):
        for line in open(path):
            if line.startswith("ExecStart="):
                words = shlex.split(line.split("=", 1)[1])
                check(binary_of(words[0]), words[1:], f"{rel(path)}: ExecStart")
            m = re.match(r'Environment="?LOCKSTEP_(COORDINATOR|WORKER)_FLAGS=(.*?)"?$',
                         line.rstrip("\n"))
            if m:
                b = "lockstep-" + m.group(1).lower()
                check(b, shlex.split(m.group(2)), f"{rel(path)}: Environment")
    elif name.endswith(".env"):
        for line in open(path):
            m = re.match(r"LOCKSTEP_(COORDINATOR|WORKER)_FLAGS=(.*)", line)
            if m:
                b = "lockstep-" + m.group(1).lower()
                check(b, shlex.split(shlex.split(m.group(2))[0]), rel(path))
    elif name.endswith(".Dockerfile"):
        text = open(path).read().replace("\\\n", " ")
        entry = None
        for line in text.splitlines():
            m = re.match(r"\s*(ENTRYPOINT|CMD)\s+(\[.*\])\s*$", line)
            if m:
                words = json.loads(m.group(2))
                if m.group(1) == "ENTRYPOINT":
                    entry = binary_of(words[0])
                    check(entry, words[1:], f"{rel(path)}: ENTRYPOINT")
                else:
                    check(entry, words, f"{rel(path)}: CMD")
            m = re.search(r"HEALTHCHECK.*\bCMD\s+(\[.*\])\s*$", line)
            if m:
                words = json.loads(m.group(1))
                check(binary_of(words[0]), words[1:], f"{rel(path)}: HEALTHCHECK")
    elif name == "compose.yaml":
        doc = yaml.safe_load(open(path))
        for svc_name, svc in doc["services"].items():
            dockerfile = (svc.get("build") or {}).get("dockerfile", "")
            b = "lockstep-coordinator" if "coordinator" in dockerfile else \
                "lockstep-worker"
            check(b, svc.get("command") or [], f"{rel(path)}: services.{svc_name}")
            test = (svc.get("healthcheck") or {}).get("test") or []
            if len(test) > 1:
                check(binary_of(test[1]), test[2:],
                      f"{rel(path)}: services.{svc_name}.healthcheck")
    elif name.endswith(".yaml") and "/k8s/" in path:
        for doc in yaml.safe_load_all(open(path)):
            spec = ((doc or {}).get("spec") or {}).get("template", {}).get("spec")
            for c in (spec or {}).get("containers", []):
                cmd = c.get("command") or []
                b = binary_of(cmd[0]) if cmd else None
                if b is None:
                    errors.append(f"{rel(path)}: container {c['name']}: command does "
                                  "not name a Lockstep binary")
                    continue
                check(b, cmd[1:] + (c.get("args") or []),
                      f"{rel(path)}: {doc['kind']}/{doc['metadata']['name']} "
                      f"container {c['name']}")
    # Every file, every non-comment line: a --flag that is no other tool's
    # must be a Lockstep flag; in shell, a line that invokes a Lockstep binary
    # is checked against that binary.
    if name.endswith((".py", ".dockerignore")):
        continue
    text = open(path).read()
    text = re.sub(r"\\\n\s*", " ", text)
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("#", "//")):
            continue
        where = f"{rel(path)}: {line.strip()[:60]}"
        tokens = re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", line)
        for t in tokens:
            f = t[2:]
            if f in ALL or f in FOREIGN:
                continue
            errors.append(f"{where}: --{f} is no flag of any Lockstep binary")
        if name.endswith((".sh", ".sbatch", ".md")):
            b = None
            if re.search(r"coordinator_bin\}?\"? |lockstep-coordinator\s+--", line):
                b = "lockstep-coordinator"
            elif re.search(r"(worker_bin|WORKER_BIN)\}?\"? daemon|lockstep-worker\s+(daemon|probe)", line):
                b = "lockstep-worker"
            elif re.search(r"(cli_bin\}?\"? |^\s*cli |\blockstep\s+--)", line):
                b = "lockstep"
            if b:
                words = re.findall(r"--[A-Za-z][\w-]*=?", line)
                check(b, [w.rstrip("=") for w in words if w[2:].rstrip("=") not in
                          FOREIGN], where)

for e in errors:
    print(f"flags: {e}")
summary = ", ".join(f"{n} uses of {b} flags" for b, n in checked.items())
print(f"flags: {len(files)} files; {summary}; "
      f"{sum(len(v) for v in FLAGS.values())} flags known")
sys.exit(1 if errors else 0)
PY
}

# args_smoke BIN_DIR ROOT: starts the binaries with the argument lists the
# deploy files give them (systemd, Dockerfiles, compose, Kubernetes), with
# addresses moved to loopback and paths to a scratch folder: every
# coordinator must start, answer /healthz and /readyz with 200 where it has
# --http_listen, and exit 0 on SIGTERM; every worker must connect and exit 0
# on SIGTERM. This catches values a flag refuses, not only unknown names.
args_smoke() {
  "${py}" - "$1" "$2" <<'PY'
import json, os, re, shlex, signal, subprocess, sys, tempfile, time
import urllib.request
import yaml

bin_dir, root = sys.argv[1], sys.argv[2]
deploy = os.path.join(root, "deploy")
coordinator_bin = os.path.join(bin_dir, "server/lockstep-coordinator")
worker_bin = os.path.join(bin_dir, "worker/lockstep-worker")
cli_bin = os.path.join(bin_dir, "client/lockstep")
scratch = tempfile.mkdtemp(prefix="lockstep-args-")
coordinators, workers = [], []  # (source, args)

def env_flags(path, var):
    for line in open(path):
        if line.startswith(var + "="):
            return shlex.split(shlex.split(line.split("=", 1)[1])[0])
    return []

# systemd: ExecStart plus the example environment file.
for unit, env, var in (
    ("lockstep-coordinator.service", "coordinator.env",
     "LOCKSTEP_COORDINATOR_FLAGS"),
    ("lockstep-worker@.service", "worker.env", "LOCKSTEP_WORKER_FLAGS")):
    for line in open(os.path.join(deploy, "systemd", unit)):
        if line.startswith("ExecStart="):
            words = shlex.split(line.split("=", 1)[1].replace("%S", "/var/lib")
                                .replace("%H", "host").replace("%i", "0"))
            words = [w for w in words[1:] if not w.startswith("$")]
            words += env_flags(os.path.join(deploy, "systemd", env), var)
            (coordinators if "coordinator" in unit else workers).append(
                (f"systemd/{unit} + {env}", [w for w in words if w != "daemon"]))
# Dockerfiles: ENTRYPOINT + CMD.
for f in sorted(os.listdir(os.path.join(deploy, "container"))):
    if not f.endswith(".Dockerfile"):
        continue
    text = open(os.path.join(deploy, "container", f)).read().replace("\\\n", " ")
    entry = json.loads(re.search(r"^ENTRYPOINT\s+(\[.*\])", text, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD\s+(\[.*\])", text, re.M).group(1))
    args = [w for w in entry[1:] + cmd if w != "daemon"]
    (coordinators if "coordinator" in entry[0] else workers).append(
        (f"container/{f}", args))
# Compose.
doc = yaml.safe_load(open(os.path.join(deploy, "container", "compose.yaml")))
for name, svc in doc["services"].items():
    (coordinators if name == "coordinator" else workers).append(
        (f"compose.yaml services.{name}", list(svc.get("command") or [])))
# Kubernetes.
for f in sorted(os.listdir(os.path.join(deploy, "k8s"))):
    if not f.endswith(".yaml"):
        continue
    for doc in yaml.safe_load_all(open(os.path.join(deploy, "k8s", f))):
        spec = ((doc or {}).get("spec") or {}).get("template", {}).get("spec")
        for c in (spec or {}).get("containers", []):
            cmd = c.get("command") or []
            args = [re.sub(r"\$\((\w+)\)", lambda m: m.group(1).lower(), a)
                    for a in cmd[1:] + (c.get("args") or [])]
            args = [a for a in args if a != "daemon"]
            (coordinators if "coordinator" in cmd[0] else workers).append(
                (f"k8s/{f} {doc['metadata']['name']}/{c['name']}", args))

errors = []
def rewrite(args, replace):
    out = []
    for a in args:
        m = re.match(r"--(\w+)(=(.*))?$", a)
        if m and m.group(1) in replace:
            v = replace[m.group(1)]
            if v is not None:
                out.append(f"--{m.group(1)}={v}")
        else:
            out.append(a)
    return out

def wait_file(path, seconds):
    end = time.time() + seconds
    while time.time() < end:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        time.sleep(0.05)
    return None

def stop(proc, what, seconds=10):
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        errors.append(f"{what}: did not exit within {seconds} s of SIGTERM")
        return
    if rc != 0:
        errors.append(f"{what}: exited with {rc} on SIGTERM")

def log_tail(path):
    return " | ".join(open(path).read().strip().splitlines()[-3:])

main_address = None
main_proc = None
for i, (source, args) in enumerate(coordinators):
    d = os.path.join(scratch, f"c{i}")
    os.makedirs(d)
    has_http = any(a.startswith("--http_listen=") for a in args)
    run = rewrite(args, {
        "listen": None, "http_listen": "127.0.0.1:0" if has_http else None,
        "db": os.path.join(d, "lockstep.db"),
        "zoo_dir": os.path.join(root, "examples"),
        "port_file": None, "http_port_file": None})
    run += ["--listen=127.0.0.1:0", f"--port_file={d}/port"]
    if has_http:
        run.append(f"--http_port_file={d}/http_port")
    log = os.path.join(d, "log")
    proc = subprocess.Popen([coordinator_bin] + run, cwd=d,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    port = wait_file(f"{d}/port", 10)
    if port is None:
        proc.kill(); proc.wait()
        errors.append(f"{source}: the coordinator did not start: {log_tail(log)}")
        continue
    ok = True
    if has_http:
        http = wait_file(f"{d}/http_port", 5)
        for path in ("/healthz", "/readyz"):
            try:
                code = urllib.request.urlopen(
                    f"http://127.0.0.1:{http}{path}", timeout=5).status
            except Exception as e:
                code = e
            if code != 200:
                ok = False
                errors.append(f"{source}: GET {path} answered {code}")
    print(f"flags: started coordinator as in {source}"
          f"{' (/healthz, /readyz: 200)' if has_http and ok else ''}")
    if main_proc is None:
        main_proc, main_address = proc, f"127.0.0.1:{port}"
    else:
        stop(proc, source)

# Argument lists that differ only in --name (the containers of the x8
# DaemonSet, the compose workers) are started once.
unique = {}
for source, args in workers:
    key = tuple(a for a in args if not a.startswith("--name="))
    unique.setdefault(key, []).append(source)
workers = [(sources[0] + (f" (and {len(sources) - 1} more that differ only "
                          "in --name)" if len(sources) > 1 else ""), list(key))
           for key, sources in unique.items()]

if main_proc is not None:
    procs = []
    for i, (source, args) in enumerate(workers):
        d = os.path.join(scratch, f"w{i}")
        os.makedirs(d)
        name = f"args-smoke-{i}"
        run = rewrite(args, {"coordinator": main_address, "name": name,
                             "data_root": d})
        if not any(a.startswith("--name=") for a in run):
            run.append(f"--name={name}")
        run.append("--selftest=false")
        log = os.path.join(d, "log")
        proc = subprocess.Popen([worker_bin, "daemon"] + run, cwd=d,
                                stdout=open(log, "w"), stderr=subprocess.STDOUT)
        procs.append((source, name, proc, log))
    connected = set()
    end = time.time() + 60
    while time.time() < end and len(connected) < len(procs):
        out = subprocess.run([cli_bin, f"--coordinator={main_address}", "--json",
                              "workers"], capture_output=True, text=True).stdout
        try:
            connected = {w["name"] for w in json.loads(out).get("workers", [])
                         if w.get("state") == "WORKER_CONNECTED"}
        except ValueError:
            pass
        if any(p.poll() is not None for _, _, p, _ in procs):
            break
        time.sleep(0.3)
    for source, name, proc, log in procs:
        if proc.poll() is not None:
            errors.append(f"{source}: the worker exited with {proc.returncode}: "
                          f"{log_tail(log)}")
        elif name not in connected:
            errors.append(f"{source}: the worker did not connect: {log_tail(log)}")
            proc.kill(); proc.wait()
        else:
            print(f"flags: started worker as in {source}: connected")
            stop(proc, source)
    stop(main_proc, coordinators[0][0])

for e in errors:
    print(f"flags: {e}")
subprocess.run(["rm", "-rf", scratch])
sys.exit(1 if errors else 0)
PY
}

check_flags() {
  local helps rc=0
  helps="$(mktemp -d)"
  "${bin}/server/lockstep-coordinator" --helpfull >"${helps}/lockstep-coordinator" 2>&1
  "${bin}/worker/lockstep-worker" --helpfull >"${helps}/lockstep-worker" 2>&1
  "${bin}/client/lockstep" --helpfull >"${helps}/lockstep" 2>&1
  flag_scan "${helps}" "${root}" || rc=1
  args_smoke "${bin}" "${root}" || rc=1
  # The negative control: a copy with two misspelled flags, one in a
  # Kubernetes manifest and one in the Slurm batch script, must fail,
  # naming both.
  local copy="${helps}/copy"
  local bad_k8s=heartbeat_intervall_ms bad_slurm=worker_label
  mkdir -p "${copy}/deploy" "${copy}/docs"
  cp -r "${deploy}"/{systemd,container,k8s,slurm} "${deploy}/deploy_checks.sh" \
    "${copy}/deploy/"
  cp "${root}/docs/deployment.md" "${copy}/docs/"
  sed -i "s/--heartbeat_interval_ms=/--${bad_k8s}=/" \
    "${copy}/deploy/k8s/coordinator.yaml"
  sed -i "s/--worker_labels=/--${bad_slurm}=/" \
    "${copy}/deploy/slurm/lockstep-audit.sbatch"
  local out
  if out="$(flag_scan "${helps}" "${copy}")"; then
    echo "flags: the check accepted misspelled flags"
    rc=1
  elif ! grep -q "coordinator.yaml.*no flag --${bad_k8s}" <<<"${out}" \
      || ! grep -q "lockstep-audit.sbatch.*no flag --${bad_slurm}\b" <<<"${out}"; then
    echo "flags: the check missed a misspelled flag:"
    printf '%s\n' "${out}"
    rc=1
  else
    echo "flags: misspelled flags in a manifest and in the batch script are rejected (as they must be)"
  fi
  rm -rf "${helps}"
  return "${rc}"
}

run_check() {
  case "$1" in
    systemd) "${deploy}/systemd/verify_units.sh" "${bin}" ;;
    flags) check_flags ;;
    container)
      "${py}" -c 'import yaml' 2>/dev/null || {
        echo "container: SKIP: python3-yaml missing"; return 77; }
      "${py}" "${deploy}/container/check_container.py" ;;
    k8s)
      "${py}" -c 'import yaml' 2>/dev/null || {
        echo "k8s: SKIP: python3-yaml missing"; return 77; }
      "${py}" "${deploy}/k8s/validate_manifests.py" "${deploy}/k8s" ;;
    slurm) "${deploy}/slurm/drill.sh" "${bin}" ;;
    *) echo "deploy-checks: unknown check $1"; return 64 ;;
  esac
}

results=()
failed=0
for c in "${checks[@]}"; do
  echo
  echo "deploy-checks: ${c}"
  start=${SECONDS}
  run_check "${c}"
  rc=$?
  took=$((SECONDS - start))
  case "${rc}" in
    0) results+=("PASS  ${c} (${took} s)") ;;
    77) results+=("SKIP  ${c} (a tool it needs is missing; see above)") ;;
    *) results+=("FAIL  ${c} (exit ${rc}, ${took} s)"); failed=1 ;;
  esac
done
echo
for r in "${results[@]}"; do echo "deploy-checks: ${r}"; done
exit "${failed}"
