#!/usr/bin/env bash
# check_libs.sh BUNDLE: every shared library that a program of BUNDLE/bin needs, directly or
# through a library of BUNDLE/lib, is either in BUNDLE/lib, or the C/C++ runtime
# (system_libs.txt), or one of CUDA's libraries that run.sh looks for on the GPU machine
# (cuda_libs.txt). Reads the ELF files' NEEDED entries (readelf), so it needs neither CUDA nor a
# GPU. Prints "check_libs: ok (N programs, M libraries)" or each unmet need, and exits 1 then.
set -euo pipefail
bundle=${1:?usage: check_libs.sh BUNDLE}
lists=$(dirname "$0")
[[ -f "$bundle/cuda_libs.txt" ]] && lists=$bundle  # inside an unpacked bundle

allowed() {  # soname: in one of the two lists?
  grep -qxF "$1" <(grep -v '^#' "$lists/system_libs.txt" "$lists/cuda_libs.txt" | cut -d: -f2)
}

declare -A seen=()
bad=0
check() {  # file, who-needs-it
  local f=$1 name
  while read -r name; do
    [[ -n ${seen[$name]:-} ]] && continue
    seen[$name]=1
    if [[ -f "$bundle/lib/$name" ]]; then
      check "$bundle/lib/$name" "$name"
    elif ! allowed "$name"; then
      echo "check_libs: $2 needs $name: not in $bundle/lib, not the C/C++ runtime, not CUDA's" >&2
      bad=1
    fi
  done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
}

programs=0
for p in "$bundle"/bin/*; do
  check "$p" "bin/$(basename "$p")"
  programs=$((programs + 1))
done
((programs > 0)) || { echo "check_libs: no programs in $bundle/bin" >&2; exit 1; }
((bad == 0)) || exit 1
echo "check_libs: ok ($programs programs, $(ls "$bundle/lib" | grep -c '\.so') libraries)"
