"""dpe_dependencies(): every external repository dpe needs, declared once for dpe's own WORKSPACE
and for any workspace that uses dpe through local_repository(name = "dpe", ...).

All of them are local (Bazel runs offline here): stand-ins for the rule sets Bazel 4.2.3 would
download, the system libraries from Debian's packages (tools/bazelw lists them), and the CUDA
toolkit when /usr/local/cuda has one. A repository the calling workspace has already declared
under the same name is left as it is.
"""

load(":local_cuda.bzl", "local_cuda")

# System libraries under /usr, each with its BUILD file in bazel/third_party/.
_SYSTEM_LIBRARIES = [
    "gtest",
    "tbb",
    "dnnl",
    "gloo",
    "zlib",
    "cli11",
    "nlohmann_json",
    "benchmark",
    "sentencepiece",  # the language-model corpus's tokenizer (engine/data/tokenizer.h)
    "tcmalloc",  # the process's malloc (bazel/third_party/tcmalloc.BUILD)
]

def _stub_repository_impl(ctx):
    # The stand-in's folder inside dpe, found through a file of dpe's so that it resolves in
    # whichever workspace dpe is: the main one or an external repository.
    stubs = ctx.path(Label("//bazel:BUILD")).dirname.get_child("stubs")
    source = stubs.get_child(ctx.attr.stub)
    for entry in source.readdir():
        ctx.symlink(entry, entry.basename)

# A copy (by symlinks) of one of dpe's stand-ins in bazel/stubs/.
_stub_repository = repository_rule(
    implementation = _stub_repository_impl,
    attrs = {"stub": attr.string(mandatory = True)},
    local = True,
)

def _declare(rule, name, **kwargs):
    if not native.existing_rule(name):
        rule(name = name, **kwargs)

def dpe_dependencies():
    """Declares dpe's external repositories; call it from WORKSPACE after loading this file."""

    # Offline stand-ins for the repositories Bazel 4.2.3 would otherwise download.
    for stub in ["rules_cc", "rules_java", "remote_coverage_tools"]:
        _declare(_stub_repository, stub, stub = stub)

    for lib in _SYSTEM_LIBRARIES:
        _declare(
            native.new_local_repository,
            lib,
            path = "/usr",
            build_file = str(Label("//bazel/third_party:%s.BUILD" % lib)),
        )

    # Open MPI 4.1 from Debian's libopenmpi-dev: its headers live outside /usr/include.
    _declare(
        native.new_local_repository,
        "openmpi",
        path = "/usr/lib/x86_64-linux-gnu/openmpi",
        build_file = str(Label("//bazel/third_party:openmpi.BUILD")),
    )

    # Detects /usr/local/cuda at fetch time; without it, the CUDA backend is left out of the build.
    _declare(local_cuda, "local_cuda")
