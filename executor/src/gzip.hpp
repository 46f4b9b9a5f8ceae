#pragma once

// gzip for plan files: the bundled plans are installed compressed (about a twentieth of their JSON),
// and every reader of a plan file takes either form.

#include <cstddef>
#include <string>
#include <string_view>

namespace loom {

// Whether `bytes` start with gzip's magic number. JSON text never does: 0x1f is not JSON whitespace.
bool isGzip(std::string_view bytes);

// The gzip member of `data`, the same bytes for the same data and zlib (header time 0, no file name).
std::string gzipCompress(std::string_view data);

// The data of the gzip stream `bytes` (concatenated members too). A stream that does not decompress, or
// whose data is longer than `maxBytes`, is a PlanError of `origin` at "$".
std::string gzipDecompress(std::string_view bytes, size_t maxBytes, const std::string& origin);

}  // namespace loom
