#!/usr/bin/python3
"""Parity of Lockstep's CANONICAL float32 training with PyTorch in float64.

  parity.py --worker=PATH --examples=DIR [--steps=3] [--work=DIR] [--models=a,b]

For every zoo model (every folder of --examples with a model.json and a
config.json, plus each model_<variant>.json beside it, e.g. gpt_tiny's
model_tied.json, run with the folder's config.json): runs `lockstep-worker run --dump=all` for --steps steps of the
model's config (every step captured), then torch_reference.py's float64
trajectory from the same initial weights, batches and dropout masks, and
compares every dumped tensor against its bound; then local_check.py checks
each op on Lockstep's own inputs against its elementwise rounding bound. Prints, per model, the
largest relative L2 error per role and per op, and every tensor out of
bounds. Exit status 0 only if every model ran and every tensor is within
bounds; a model with an op the reference does not know fails
("unsupported op X").
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np  # noqa: F401
    import torch
except ImportError as e:
    sys.stderr.write(
        "parity: %s: the PyTorch parity suite needs Debian's python3-torch and "
        "python3-numpy for /usr/bin/python3; run deploy/install-deps.sh (as "
        "root) to install them\n" % e)
    sys.exit(2)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import local_check  # noqa: E402
import torch_reference as ref  # noqa: E402

# Smallest positive float32 (a subnormal): as the learning rate of the
# one-step SGD run that dumps the initial parameters unchanged.
_TINY_LR = 1.401298464324817e-45


def run_worker(worker, model_path, config, work, name):
    cfg_path = os.path.join(work, name + ".config.json")
    with open(cfg_path, "w") as f:
        json.dump(config, f)
    out = os.path.join(work, name)
    p = subprocess.run(
        [worker, "run", "--model=" + model_path, "--config=" + cfg_path,
         "--runs=1", "--dump=all", "--dump_dir=" + out],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("lockstep-worker run (%s) exited %d:\n%s" %
                           (name, p.returncode, p.stdout))
    return ref.load_dump(out)


def dump_model(worker, model_dir, steps, work, tag="", model_file="model.json"):
    """Runs a zoo model for `steps` steps and once more for its initial
    parameters. Returns (model, config, training dump, initial parameters).
    """
    model_path = os.path.join(model_dir, model_file)
    with open(model_path) as f:
        model = json.load(f)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    ref.check_ops(model)
    local_check.check_families(model)
    name = (os.path.basename(os.path.normpath(model_dir)) +
            model_file[len("model"):-len(".json")] + tag)
    train = dict(config, steps=steps, capture={"kind": "EVERY_STEP"})
    # The same job with an update that leaves every parameter as initialised
    # (initialisation depends on the seed and the model only): its step-0
    # WEIGHT and BIAS tensors are the initial parameters.
    init = dict(config, steps=1, capture={"kind": "EVERY_STEP"},
                optimizer={"kind": "SGD", "learning_rate": _TINY_LR})
    dump = run_worker(worker, model_path, train, work, name + "_train")
    if sorted(dump) != list(range(steps)):
        raise RuntimeError("%s: the dump holds steps %s, expected 0..%d" %
                           (name, sorted(dump), steps - 1))
    init_params = ref.initial_parameters(
        run_worker(worker, model_path, init, work, name + "_init"))
    return model, config, dump, init_params


def parity_of_model(worker, model_dir, steps, work, model_file="model.json"):
    model, config, dump, init_params = dump_model(worker, model_dir, steps, work,
                                                  model_file=model_file)
    results, problems = ref.compare(model, config, dump, init_params)
    local, local_problems = local_check.local_check(model, config, dump, init_params)
    return results, problems, local, local_problems


def summarize_local(local):
    """One line: per op, the largest error in units of U * cond (elementwise
    bounds) or the relative L2 (compound ops)."""
    worst = {}
    for r in local:
        k = (r["op"], r["measure"])
        if r["value"] >= worst.get(k, (-1.0,))[0]:
            worst[k] = (r["value"], r["bound"])
    return "  one op at a time: " + ", ".join(
        ("%s %.2g U*cond (<= %d)" if m == "k" else "%s rel L2 %.1e (<= %.0e)") %
        (op, v, b) for (op, m), (v, b) in sorted(worst.items()))


def summarize(name, results):
    """Lines: the maximum relative L2 per role, then per op."""
    by_role, by_op, mx = {}, {}, {}
    for r in results:
        mx[r["role"]] = max(mx.get(r["role"], 0.0), r["relmax"])
        k = r["role"]
        if r["rel"] > by_role.get(k, (-1,))[0]:
            by_role[k] = (r["rel"], r)
        op = r["op"] if r["role"] != "UPDATE" else r["op"] + " (update)"
        by_op[op] = max(by_op.get(op, 0.0), r["rel"])
    lines = ["%s: %d tensors compared" % (name, len(results))]
    for k in sorted(by_role):
        rel, r = by_role[k]
        lines.append("  %-16s max rel L2 %.3e  (bound %.1e; step %d layer %s%s)"
                     "  max elem/rms %.2e" %
                     (k, rel, r["bound"], r["step"], r["layer"] or "-",
                      " " + r["slot"] if r["slot"] else "", mx[k]))
    lines.append("  per op: " + ", ".join(
        "%s %.1e" % (op, v) for op, v in sorted(by_op.items())))
    return lines, {k: {"rel_l2": v[0], "rel_max": mx[k]} for k, v in by_role.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--work", default="")
    ap.add_argument("--models", default="", help="comma-separated subset")
    ap.add_argument("--json", default="", help="write the per-model maxima here")
    a = ap.parse_args()
    torch.set_num_threads(1)

    models = sorted(
        d for d in os.listdir(a.examples)
        if os.path.isfile(os.path.join(a.examples, d, "model.json")) and
        os.path.isfile(os.path.join(a.examples, d, "config.json")))
    if a.models:
        wanted = a.models.split(",")
        missing = [m for m in wanted if m not in models]
        if missing:
            sys.exit("parity: no zoo model %s in %s" % (missing, a.examples))
        models = wanted
    if not models:
        sys.exit("parity: no model.json + config.json folders in %s" % a.examples)

    work = a.work or tempfile.mkdtemp(prefix="parity-")
    os.makedirs(work, exist_ok=True)
    failures, maxima = [], {}
    runs = []  # (name, folder, model file)
    for m in models:
        for f in sorted(os.listdir(os.path.join(a.examples, m))):
            if f == "model.json":
                runs.append((m, m, f))
            elif f.startswith("model_") and f.endswith(".json"):
                runs.append((m + "/" + f[:-len(".json")], m, f))
    for m, folder, model_file in runs:
        t0 = time.time()
        try:
            results, problems, local, local_problems = parity_of_model(
                a.worker, os.path.join(a.examples, folder), a.steps, work,
                model_file)
        except Exception as e:  # a failed model is reported, the rest still run
            failures.append("%s: %s: %s" % (m, type(e).__name__, e))
            print("%s: FAILED: %s" % (m, e))
            continue
        lines, maxima[m] = summarize(m, results)
        print("\n".join(lines))
        print(summarize_local(local))
        print("  (%.1f s)" % (time.time() - t0))
        failures += ["%s: %s" % (m, p) for p in problems]
        failures += ["%s: one op at a time: %s" % (m, p) for p in local_problems]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(maxima, f, indent=1, sort_keys=True)
    if failures:
        print("\nparity: %d problem(s):" % len(failures))
        for f in failures:
            print("  " + f)
        return 1
    print("\nparity: %d models, every tensor within bounds" % len(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
