#!/usr/bin/python3
"""Checks that the parity comparison has teeth (run by parity_test.sh).

  parity_selftest.py WORKER EXAMPLES_DIR WORK_DIR

Against a real 2-step dump of the mlp and char_lm zoo models:
  1. the unmodified dump passes;
  2. one element of one dumped tensor scaled by 1.002 is reported, naming
     that step, layer, role and element, and nothing else is (a relative L2
     bound alone would dilute it by sqrt(numel)); one op at a time, it is
     reported at that layer;
  3. a reference op with the wrong semantics (GELU's tanh form for the erf
     form) is reported at the first tensor it computes, by both checks;
  4. an op the reference does not know fails with "unsupported op X".
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity  # noqa: E402  (exits with the install hint without torch)
import local_check  # noqa: E402
import torch_reference as ref  # noqa: E402

FAILED = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        FAILED.append(what)


def dumps(worker, examples, work, name):
    """(model, config, 2-step dump, initial parameters) of a zoo model."""
    return parity.dump_model(worker, os.path.join(examples, name), 2, work, "_self")


def main():
    worker, examples, work = sys.argv[1:4]
    ref.torch.set_num_threads(1)
    os.makedirs(work, exist_ok=True)

    model, config, dump, init = dumps(worker, examples, work, "mlp")
    _, problems = ref.compare(model, config, dump, init)
    check(not problems, "mlp: the unmodified dump is within bounds")
    _, problems = local_check.local_check(model, config, dump, init)
    check(not problems, "mlp: every op of the unmodified dump is within its "
          "own rounding bound")

    target = next(e for e in dump[1] if e.layer == "fc1" and e.role == "ACTIVATION")
    v = target.value().copy()
    # An element of 90th-percentile magnitude, 0.2% off: too little for the
    # relative L2 bound (diluted by the other elements), enough for the
    # elementwise one.
    big = int(np.argsort(np.abs(v).ravel())[int(0.9 * v.size)])
    v.flat[big] *= 1.002
    target._value = v
    _, problems = ref.compare(model, config, dump, init)
    check(len(problems) == 1 and problems[0].startswith(
        'step 1 layer "fc1" ACTIVATION (dense.forward): element %d is' % big),
          "mlp: one element of step 1 fc1 ACTIVATION 0.2%% off is "
          "the one problem reported: %s" % problems)
    # One op at a time: fc1's output is off; relu1, which reads it, can only
    # be reported too (where the element is positive).
    _, problems = local_check.local_check(model, config, dump, init)
    check(bool(problems) and problems[0].startswith(
        'step 1 layer "fc1" ACTIVATION (DENSE): element %d is' % big) and
          all(p.startswith('step 1 layer "relu1"') for p in problems[1:]),
          "mlp, one op at a time: the element is reported at fc1: %s" % problems)

    model, config, dump, init = dumps(worker, examples, work, "char_lm")
    _, problems = ref.compare(model, config, dump, init)
    check(not problems, "char_lm: the unmodified dump is within bounds")
    gelu = ref.OPS["GELU"]
    ref.OPS["GELU"] = ref.OPS["GELU_TANH"]
    try:
        _, problems = ref.compare(model, config, dump, init)
        _, local_problems = local_check.local_check(model, config, dump, init)
    finally:
        ref.OPS["GELU"] = gelu
    check(bool(problems) and problems[0].startswith(
        'step 0 layer "gelu1" ACTIVATION (gelu.forward)'),
          "char_lm: GELU computed in the tanh form is caught at step 0 gelu1 "
          "ACTIVATION: %s" % problems[:1])
    check(bool(local_problems) and local_problems[0].startswith(
        'step 0 layer "gelu1" ACTIVATION (GELU)'),
          "char_lm, one op at a time: the same at step 0 gelu1 ACTIVATION: %s" %
          local_problems[:1])

    try:
        ref.check_ops({"layers": [{"name": "conv3", "op": "CONV3D"}]})
        check(False, "an unknown op is refused")
    except NotImplementedError as e:
        check("unsupported op CONV3D (layer \"conv3\")" in str(e),
              "an unknown op is refused: %s" % e)

    if FAILED:
        print("parity_selftest: %d check(s) failed" % len(FAILED))
        return 1
    print("parity_selftest: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
