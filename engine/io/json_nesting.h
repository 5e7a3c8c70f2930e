// How deeply a JSON text nests objects and arrays, counted without parsing it. nlohmann's parser
// and serializer recurse once per level, so a reader refuses deep input before parsing it: a
// crafted file cannot exhaust the stack (a checkpoint.json of 100 000 levels crashed `dump`).
//
// Threading contract: a pure function; call it from any thread.
#pragma once

#include <string_view>

namespace dpe {

// The depth of the deepest object or array in `text` (0 for a scalar; strings skipped, escapes
// honoured), or `limit + 1` as soon as it exceeds `limit`. Malformed text is counted as it comes;
// the parser reports what is wrong with it.
int json_nesting_depth(std::string_view text, int limit);

}  // namespace dpe
