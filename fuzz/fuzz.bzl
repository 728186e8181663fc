"""libFuzzer harnesses, each with a replay test for the normal suite.

ls_fuzzer(name = "npy", srcs = ["npy_fuzzer.cc"], deps = [...]) defines
  npy_fuzzer      the libFuzzer binary. Tagged manual: it links with
                  -fsanitize=fuzzer and builds only under --config=fuzz
                  (clang), e.g. through fuzz/run_fuzzers.sh.
  npy_replay_test a plain cc_test (any compiler, no sanitizer needed) that
                  links the same LLVMFuzzerTestOneInput with replay_main.cc
                  and runs every file of corpus/npy/ and regressions/npy/
                  through it, so every seed and every past crash stays a
                  regression test of `bazel test //...`.
extra_corpus: more corpus labels (e.g. generated binary seeds); their
files are replayed too, and run_fuzzers.sh seeds the fuzzer with them.
"""

load("//bazel:ls.bzl", "LS_COPTS")

def ls_fuzzer(name, srcs, deps = [], copts = [], extra_corpus = [], size = "small"):
    native.cc_binary(
        name = name + "_fuzzer",
        srcs = srcs + ["fuzz_check.h"],
        copts = LS_COPTS + copts,
        linkopts = ["-fsanitize=fuzzer"],
        deps = deps,
        tags = ["manual", "fuzzer"],
        testonly = True,
    )
    native.filegroup(
        name = name + "_inputs",
        srcs = native.glob([
            "corpus/" + name + "/**",
            "regressions/" + name + "/**",
        ]) + extra_corpus,
    )
    native.cc_test(
        name = name + "_replay_test",
        size = size,
        srcs = srcs + ["fuzz_check.h", "replay_main.cc"],
        copts = LS_COPTS + copts,
        deps = deps,
        data = [":" + name + "_inputs"],
        args = ["$(rootpaths :%s_inputs)" % (name)],
    )
