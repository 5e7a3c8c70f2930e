#!/usr/bin/env bash
# The layering check: reads every project #include under engine/, kernels/, models/, tools/ and
# examples/ and fails, naming file, line and both layers, when a file includes a header of a
# higher layer or of a peer (tools/layering/layers.txt; Bazel's target graph cannot see
# folder-level cycles).
#   tools/layering/check.sh            check the tree, print "layering: ok" or the violations
#   tools/layering/check.sh --picture  print the layer picture docs/design.md shows
#   tools/layering/check.sh --docs     also check that docs/design.md shows that picture
set -euo pipefail
cd "$(dirname "$0")/../.."
layers=tools/layering/layers.txt

# The layers' lines without comments: "folder [folder...] -- description".
entries() { grep -v '^#' "$layers" | grep -v '^[[:space:]]*$'; }

picture() {
  # Highest layer on top, peers side by side, each with its description.
  entries | tac | awk -F ' -- ' '{
    n = split($1, f, " "); line = f[1]
    for (i = 2; i <= n; ++i) line = line " | " f[i]
    printf "%-42s %s\n", line, $2
  }' | sed 's/[[:space:]]*$//'
}

if [[ "${1:-}" == "--picture" ]]; then
  picture
  exit 0
fi

status=0
if [[ "${1:-}" == "--docs" ]]; then
  # The picture sits in docs/design.md between these two marker lines.
  shown=$(awk '/<!-- layers:begin -->/{on=1; next} /<!-- layers:end -->/{on=0} on' docs/design.md |
          grep -v '^```' || true)
  if [[ "$shown" != "$(picture)" ]]; then
    echo "layering: docs/design.md's layer picture differs from $layers; replace it with:"
    picture
    status=1
  fi
fi

# file:line:included-path for every project include, then the layer check in awk.
find engine kernels models tools examples -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) |
  sort | xargs grep -Hn '^#include "' | sed -E 's/^([^:]+):([0-9]+):#include "([^"]+)".*/\1 \2 \3/' |
  awk -v layers="$layers" '
    BEGIN {
      rank = 0
      while ((getline line < layers) > 0) {
        if (line ~ /^#/ || line ~ /^[[:space:]]*$/) continue
        sub(/ -- .*/, "", line)
        n = split(line, folders, " ")
        for (i = 1; i <= n; ++i) level[folders[i]] = rank
        ++rank
      }
    }
    # The listed folder a path belongs to: its closest listed parent directory.
    function owner(path,    dir) {
      dir = path
      sub(/\/[^\/]*$/, "", dir)
      while (dir != "") {
        if (dir in level) return dir
        if (dir !~ /\//) return ""
        sub(/\/[^\/]*$/, "", dir)
      }
      return ""
    }
    {
      file = $1; lineno = $2; inc = $3
      from = owner(file); to = owner(inc)
      if (from == "" || to == "") {
        printf "layering: %s:%s includes %s: %s is in no layer of %s\n", file, lineno, inc, (from == "" ? file : inc), layers
        bad = 1
        next
      }
      if (from == to) next
      if (level[to] < level[from]) next
      printf "layering: %s:%s includes %s: %s may not include %s (%s)\n", file, lineno, inc, from, to, (level[to] == level[from] ? "a peer" : "a higher layer")
      bad = 1
    }
    END { exit bad }
  ' || status=1

if [[ $status -eq 0 ]]; then echo "layering: ok"; fi
exit $status
