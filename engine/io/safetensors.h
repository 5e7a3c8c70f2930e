// Saving and loading a state dict in the safetensors format (https://github.com/huggingface/
// safetensors): an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32"|"I64", "shape": [...], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "value"}} padded with spaces to a multiple of 8, then the raw
// little-endian tensor data, offsets counted from the end of the header.
//
// Design note "atomic save": save_safetensors writes a temporary file in the target's directory,
// flushes and fsyncs it, then renames it over the target, so a reader sees either the previous
// file or the complete new one; a failure on the way removes the temporary file and leaves the
// previous file untouched. engine/io/atomic_file.h does it for every writer that needs it.
//
// Threading contract: the functions keep no state; concurrent calls are safe on different paths.
// Saving to one path from several threads at once is safe (each rename is atomic, the last wins).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"

namespace dpe {

// Named tensors in order, as Module::state_dict() lists them.
using StateDict = std::vector<std::pair<std::string, Tensor>>;
using SafetensorsMetadata = std::map<std::string, std::string>;

struct SafetensorsSaveOptions {
  SafetensorsMetadata metadata;  // written as "__metadata__" when not empty
  // Called after the data of tensors[index] has been written to the temporary file (progress
  // reports; tests throw from it to fail a save midway). An exception aborts the save.
  std::function<void(size_t index, const std::string& name)> on_tensor_written;
};

// Writes `tensors` (any devices; copied to the host as they are written) to `path` atomically.
// Throws dpe::Error naming the file, and the tensor where one is at fault: an undefined tensor,
// an empty, reserved ("__metadata__") or repeated name, or any I/O failure.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const SafetensorsSaveOptions& options = {});

struct SafetensorsContents {
  StateDict tensors;  // in the order of their data in the file (the order they were saved)
  SafetensorsMetadata metadata;
};

// Reads every tensor of `path` onto `device`. Validates the file first and throws dpe::Error
// naming the file (and the tensor) at the first problem: unreadable file, header length larger
// than the file or than 100 MiB, invalid JSON, unknown dtype, bad shape, offsets outside the
// data section, overlapping or of the wrong length, repeated names, malformed metadata.
SafetensorsContents read_safetensors(const std::string& path, Device device = {});
// read_safetensors(path, device).tensors.
StateDict load_safetensors(const std::string& path, Device device = {});

}  // namespace dpe
