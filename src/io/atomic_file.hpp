// Internal to the io layer: the atomic writer taking the content in pieces, so a checkpoint's header
// and tensor buffers go to disk without first being copied into one string.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace tapegrad::io {

// write_file_atomic (see io.hpp) of the concatenation of `chunks`.
void write_file_atomic_chunks(const std::string& path, std::span<const std::string_view> chunks);

}  // namespace tapegrad::io
