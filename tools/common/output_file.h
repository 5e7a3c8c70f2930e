// output_file: the files a tool writes where its command line says (--json, --svg). A path that
// cannot be written is a usage error found before the run (exit 2, naming the flag, the path and
// errno's text), never a "wrote" after it; the file is written whole or not at all.
//
// Threading contract: free functions without shared state; call them from any thread.
#pragma once

#include <string>

namespace dpe::tools {

// Throws UsageError ("--json PATH: cannot write ...: <errno text>") unless `path`, given as
// `flag`, can be written as write_file_atomically writes it: a folder that takes a new file (a
// probe file is made there and removed), or an existing file that is not a regular one (such as
// /dev/null) that opens for writing. A folder at `path` is named as such. Leaves nothing behind.
void check_writable(const std::string& flag, const std::string& path);

// Writes `text` to `path` whole or not at all: into a temporary file beside it, renamed over it
// (a path that exists and is not a regular file, /dev/null, is written in place). Throws
// dpe::Error naming the path and errno's text; the temporary file is removed.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace dpe::tools
