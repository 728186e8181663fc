"""Thin wrappers around every target kind Lockstep builds.

The canonical-arithmetic flags live here and nowhere else:
  host code    -ffp-contract=off (no implicit FMA contraction), never fast-math
  device code  -fmad=false, IEEE division and sqrt, subnormals kept (no FTZ)
so that a product or sum means the same thing in every translation unit.
GPU tests get tags = ["gpu"], so `--test_tag_filters=-gpu` leaves them out
on machines without a GPU.
"""

load(
    "@local_cuda//:defs.bzl",
    "CUDA_ARCHS",
    "CUDA_ENABLED",
    "CUDA_PTX",
    "NVCC",
)

# Host flags for every C++ target.
LS_COPTS = [
    "-ffp-contract=off",
    "-fno-fast-math",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Wno-missing-field-initializers",
]

# Device flags for every CUDA translation unit.
LS_NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "-Xcompiler=-fPIC,-ffp-contract=off,-fno-fast-math",
]

def ls_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = LS_COPTS + copts, **kwargs)

def ls_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = LS_COPTS + copts, **kwargs)

def ls_cc_test(name, copts = [], deps = [], gtest_main = True, gpu = False, tags = [], **kwargs):
    """A GoogleTest test. gpu = True tags it `gpu` (needs a device to run)."""
    extra = ["@system_gtest//:gtest"]
    if gtest_main:
        extra.append("@system_gtest//:gtest_main")
    native.cc_test(
        name = name,
        copts = LS_COPTS + copts,
        deps = deps + extra,
        tags = tags + (["gpu"] if gpu else []),
        **kwargs
    )

def ls_cc_benchmark(name, copts = [], deps = [], tags = [], **kwargs):
    """A Google Benchmark binary (not a test: run it by hand or in docs)."""
    native.cc_binary(
        name = name,
        copts = LS_COPTS + copts,
        deps = deps + ["@system_benchmark//:benchmark"],
        tags = tags + ["benchmark"],
        testonly = True,
        **kwargs
    )

def _proto_rel(src):
    """'x.proto' in package proto/a/b -> 'a/b/x' (import path without .proto)."""
    pkg = native.package_name()
    if not pkg.startswith("proto/") and pkg != "proto":
        fail("ls_proto files must live under //proto, got " + pkg)
    rel = pkg[len("proto/"):]
    return rel + "/" + src[:-len(".proto")]

def ls_proto(name, srcs, deps = [], grpc = False, visibility = None):
    """protoc + grpc_cpp_plugin through a genrule.

    Keeps the usual layering of target names:
      <name>            the .proto files (a filegroup, for dependants)
      <name minus _proto>_cc_proto   messages (cc_library)
      <name minus _proto>_cc_grpc    services (cc_library), when grpc = True
    Import paths are relative to //proto: `import "lockstep/v1/job.proto"`,
    `#include "lockstep/v1/job.pb.h"`.
    deps: other ls_proto filegroups whose files these import.
    """
    if not name.endswith("_proto"):
        fail("ls_proto name must end in _proto")
    base = name[:-len("_proto")]
    native.filegroup(name = name, srcs = srcs + deps, visibility = visibility)

    rels = [_proto_rel(s) for s in srcs]
    pb_outs = []
    grpc_outs = []
    for s in srcs:
        stem = s[:-len(".proto")]
        pb_outs += [stem + ".pb.h", stem + ".pb.cc"]
        grpc_outs += [stem + ".grpc.pb.h", stem + ".grpc.pb.cc"]
    out_root = "$(GENDIR)/proto"
    cmd = ("$(location @system_tools//:protoc) --proto_path=proto " +
           "--proto_path=external/system_protobuf/include " +
           "--cpp_out=" + out_root + " ")
    tools = ["@system_tools//:protoc"]
    if grpc:
        cmd += ("--plugin=protoc-gen-grpc=$(location @system_tools//:grpc_cpp_plugin) " +
                "--grpc_out=" + out_root + " ")
        tools.append("@system_tools//:grpc_cpp_plugin")
    cmd += " ".join(["proto/" + r + ".proto" for r in rels])

    native.genrule(
        name = base + "_protoc",
        srcs = srcs + deps + ["@system_protobuf//:well_known_protos"],
        outs = pb_outs + (grpc_outs if grpc else []),
        cmd = cmd,
        tools = tools,
    )
    dep_libs = [d.replace("_proto", "_cc_proto") for d in deps]
    native.cc_library(
        name = base + "_cc_proto",
        srcs = [o for o in pb_outs if o.endswith(".cc")],
        hdrs = [o for o in pb_outs if o.endswith(".h")],
        strip_include_prefix = "/proto",
        deps = dep_libs + ["@system_protobuf//:protobuf"],
        visibility = visibility,
    )
    if grpc:
        native.cc_library(
            name = base + "_cc_grpc",
            srcs = [o for o in grpc_outs if o.endswith(".cc")],
            hdrs = [o for o in grpc_outs if o.endswith(".h")],
            strip_include_prefix = "/proto",
            deps = [":" + base + "_cc_proto", "@system_grpc//:grpc++"],
            visibility = visibility,
        )

def _nvcc_compile_impl(ctx):
    cc = ctx.attr.deps
    headers = []
    includes = []
    defines = []
    for dep in cc:
        cinfo = dep[CcInfo].compilation_context
        headers.append(cinfo.headers)
        includes += cinfo.includes.to_list() + cinfo.quote_includes.to_list() + cinfo.system_includes.to_list()
        defines += cinfo.defines.to_list()
    outs = []
    for src in ctx.files.srcs:
        out = ctx.actions.declare_file(ctx.label.name + "/" + src.basename + ".o")
        args = ctx.actions.args()
        args.add_all(LS_NVCC_FLAGS)
        for arch in ctx.attr.archs:
            args.add("-gencode=arch=compute_%s,code=sm_%s" % (arch, arch))
        if ctx.attr.ptx:
            args.add("-gencode=arch=compute_%s,code=compute_%s" % (ctx.attr.ptx, ctx.attr.ptx))
        args.add("-I.")
        args.add("-I" + ctx.bin_dir.path)
        for inc in depset(includes).to_list():
            args.add("-I" + inc)
        for d in depset(defines + ctx.attr.defines).to_list():
            args.add("-D" + d)
        args.add_all(ctx.attr.copts)
        args.add("-c", src)
        args.add("-o", out)
        ctx.actions.run(
            executable = ctx.attr.nvcc,
            arguments = [args],
            inputs = depset(ctx.files.srcs + ctx.files.hdrs, transitive = headers),
            outputs = [out],
            mnemonic = "Nvcc",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

_nvcc_compile = rule(
    implementation = _nvcc_compile_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "defines": attr.string_list(),
        "copts": attr.string_list(),
        "archs": attr.string_list(),
        "ptx": attr.string(),
        "nvcc": attr.string(),
    },
)

def ls_cuda_library(name, srcs, hdrs = [], deps = [], fallback_srcs = [], copts = [], nvcc_copts = [], **kwargs):
    """A library of CUDA kernels with a host-only fallback.

    Where the CUDA toolkit was found and --define=cuda=off is not given, the
    .cu files are compiled by nvcc for every SASS architecture in
    @local_cuda//:defs.bzl plus PTX, and linked with the CUDA runtime;
    LOCKSTEP_WITH_CUDA=1 is defined for dependants. Elsewhere the library is
    built from fallback_srcs, which must report "built without CUDA".
    """
    fallback = native.cc_library(
        name = name + "_fallback",
        srcs = fallback_srcs,
        hdrs = hdrs,
        deps = deps,
        copts = LS_COPTS + copts,
        visibility = ["//visibility:private"],
    )
    if not CUDA_ENABLED:
        native.cc_library(name = name, deps = [":" + name + "_fallback"], **kwargs)
        return
    _nvcc_compile(
        name = name + "_nvcc",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda_headers"],
        copts = nvcc_copts,
        archs = CUDA_ARCHS,
        ptx = CUDA_PTX,
        nvcc = NVCC,
    )
    native.cc_library(
        name = name + "_gpu",
        srcs = [":" + name + "_nvcc"],
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        defines = ["LOCKSTEP_WITH_CUDA=1"],
        linkstatic = True,
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        deps = select({
            "//bazel:cuda_off": [":" + name + "_fallback"],
            "//conditions:default": [":" + name + "_gpu"],
        }),
        **kwargs
    )
