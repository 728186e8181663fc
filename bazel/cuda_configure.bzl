"""Repository rule that finds the CUDA toolkit and cuDNN on the build machine.

Generates @local_cuda with:
  //:cuda_headers, //:cudart, //:vendor_rpath      C++ libraries
  //:defs.bzl                                      CUDA_ENABLED, NVCC, CUDA_ARCHS,
                                                   CUDA_VERSION, CUDNN_VERSION
Where no toolkit is found, the libraries are empty and CUDA_ENABLED is False,
so every ls_cuda_library builds its "built without CUDA" fallback.
"""

# Architectures Lockstep ships SASS for, oldest first, plus PTX for the
# newest one so later GPUs JIT-compile. An architecture the installed nvcc
# cannot target (CUDA 13 dropped sm_70) is left out and reported in defs.bzl.
_WANTED_SASS = ["70", "75", "80", "90"]
_PTX = "90"

def _find_cuda(ctx):
    for var in ["LOCKSTEP_CUDA_PATH", "CUDA_PATH"]:
        value = ctx.os.environ.get(var, "")
        if value:
            return value
    return "/usr/local/cuda"

def _read_define(ctx, path, name):
    if not ctx.path(path).exists:
        return ""
    for line in ctx.read(path).splitlines():
        parts = [p for p in line.strip().replace("\t", " ").split(" ") if p]
        if len(parts) >= 3 and parts[0] == "#define" and parts[1] == name:
            return parts[2]
    return ""

def _disabled(ctx, reason):
    ctx.file("BUILD", """package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers")
cc_library(name = "cudart")
cc_library(name = "vendor_rpath")
""")
    ctx.file("defs.bzl", """CUDA_ENABLED = False
CUDA_DISABLED_REASON = {reason}
NVCC = ""
CUDA_ROOT = ""
CUDA_ARCHS = []
CUDA_PTX = ""
CUDA_SKIPPED_ARCHS = []
CUDA_VERSION = ""
CUDNN_VERSION = ""
""".format(reason = repr(reason)))

def _cuda_configure_impl(ctx):
    root = _find_cuda(ctx)
    nvcc = ctx.path(root + "/bin/nvcc")
    if not nvcc.exists:
        _disabled(ctx, "nvcc not found under " + root)
        return
    if not ctx.path(root + "/include/cudnn.h").exists:
        _disabled(ctx, "cudnn.h not found under " + root + "/include")
        return
    listed = ctx.execute([str(nvcc), "--list-gpu-arch"])
    if listed.return_code != 0:
        _disabled(ctx, "nvcc --list-gpu-arch failed: " + listed.stderr)
        return
    available = [a.strip().replace("compute_", "") for a in listed.stdout.splitlines()]
    archs = [a for a in _WANTED_SASS if a in available]
    skipped = [a for a in _WANTED_SASS if a not in available]
    ptx = _PTX if _PTX in available else (archs[-1] if archs else "")
    if not archs:
        _disabled(ctx, "nvcc supports none of sm_" + ", sm_".join(_WANTED_SASS))
        return

    major = _read_define(ctx, root + "/include/cuda_runtime_api.h", "CUDART_VERSION")
    cudnn = ".".join([
        _read_define(ctx, root + "/include/cudnn_version.h", n)
        for n in ["CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"]
    ])

    ctx.symlink(root + "/include", "include")
    ctx.symlink(root + "/lib64", "lib64")
    libdir = str(ctx.path(root + "/lib64").realpath)

    ctx.file("BUILD", """package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_headers",
    # include/nv/ holds extensionless headers (nv/target) that cuBLAS's
    # headers include.
    hdrs = glob([
        "include/**/*.h",
        "include/**/*.hpp",
        "include/**/*.inl",
        "include/nv/**",
    ]),
    includes = ["include"],
)

# The CUDA runtime, linked statically so binaries run on machines whose
# loader does not know the toolkit's lib64.
cc_library(
    name = "cudart",
    srcs = ["lib64/libcudart_static.a"],
    linkopts = ["-ldl", "-lrt", "-lpthread"],
    deps = [":cuda_headers"],
)

# cuBLAS and cuDNN are not linked: kernels/cudnn/vendor_libs loads them
# with dlopen, by soname, through this run path among others.
cc_library(
    name = "vendor_rpath",
    linkopts = ["-Wl,-rpath,{libdir}"],
    deps = [":cuda_headers"],
)
""".format(libdir = libdir))
    ctx.file("defs.bzl", """CUDA_ENABLED = True
CUDA_DISABLED_REASON = ""
NVCC = {nvcc}
CUDA_ROOT = {root}
CUDA_ARCHS = {archs}
CUDA_PTX = {ptx}
CUDA_SKIPPED_ARCHS = {skipped}
CUDA_VERSION = {cuda}
CUDNN_VERSION = {cudnn}
""".format(
        nvcc = repr(str(nvcc)),
        root = repr(root),
        archs = repr(archs),
        ptx = repr(ptx),
        skipped = repr(skipped),
        cuda = repr(major),
        cudnn = repr(cudnn),
    ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["LOCKSTEP_CUDA_PATH", "CUDA_PATH"],
    local = True,
)
