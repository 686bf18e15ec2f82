// Writing a CLI output file through a temporary and a rename: a reader never sees a
// half-written file, and a failed run leaves the previous one (or none) in place.
#pragma once

#include <filesystem>
#include <string_view>

namespace quiesce::cli {

// Throws std::runtime_error naming the file if it cannot be written (the temporary is
// removed), std::filesystem::filesystem_error if the rename fails.
void write_atomically(const std::filesystem::path& path, std::string_view bytes);

}  // namespace quiesce::cli
