"""A boolean build setting: `--//bazel:cuda=false` (or `--config=nocuda`) leaves the CUDA backend out,
`--//bazel:tcmalloc=false` keeps glibc's malloc."""

def _bool_setting_impl(ctx):
    return []

bool_setting = rule(
    implementation = _bool_setting_impl,
    build_setting = config.bool(flag = True),
)
