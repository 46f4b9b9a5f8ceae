#include "gzip.hpp"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <memory>

#include "loom/error.hpp"

namespace loom {
namespace {

// zlib's maximum window (15 bits), plus 16: gzip framing instead of zlib's.
constexpr int kGzipWindowBits = 15 + 16;
// zlib's default level: 95% of level 9's ratio on the bundled plans at a third of its time, which a
// library installing them on first use spends inside ncclCommInitRank.
constexpr int kLevel = 6;
constexpr int kMemLevel = 8;
// zlib counts in uInt: feed it at most this much at a time.
constexpr size_t kStep = 1u << 30;

struct DeflateStream {
  z_stream stream{};
  ~DeflateStream() { deflateEnd(&stream); }
};

struct InflateStream {
  z_stream stream{};
  ~InflateStream() { inflateEnd(&stream); }
};

Error zlibFailure(const char* what, int code, const z_stream& stream) {
  return Error(ErrorCategory::kSystem,
               std::string("zlib ") + what + " failed (" + (stream.msg != nullptr ? stream.msg : zError(code)) + ")");
}

}  // namespace

bool isGzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

std::string gzipCompress(std::string_view data) {
  DeflateStream deflate;
  z_stream& stream = deflate.stream;
  // Without deflateSetHeader zlib writes a header of time 0 and no name: the output depends on the
  // data alone, so reinstalling the same plans writes the same files.
  if (int code = deflateInit2(&stream, kLevel, Z_DEFLATED, kGzipWindowBits, kMemLevel, Z_DEFAULT_STRATEGY);
      code != Z_OK) {
    throw zlibFailure("deflateInit2", code, stream);
  }
  std::string out(deflateBound(&stream, uLong(std::min<size_t>(data.size(), ULONG_MAX))), '\0');
  size_t produced = 0;
  size_t consumed = 0;
  int code = Z_OK;
  while (code != Z_STREAM_END) {
    const size_t input = std::min(data.size() - consumed, kStep);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + consumed));
    stream.avail_in = uInt(input);
    if (out.size() - produced < 64) out.resize(out.size() * 2 + 64);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    stream.avail_out = uInt(std::min(out.size() - produced, kStep));
    const uInt outBefore = stream.avail_out;
    const bool last = consumed + input == data.size();
    code = ::deflate(&stream, last ? Z_FINISH : Z_NO_FLUSH);
    if (code != Z_OK && code != Z_STREAM_END && code != Z_BUF_ERROR) throw zlibFailure("deflate", code, stream);
    consumed += input - stream.avail_in;
    produced += outBefore - stream.avail_out;
  }
  out.resize(produced);
  return out;
}

std::string gzipDecompress(std::string_view bytes, size_t maxBytes, const std::string& origin) {
  InflateStream inflate;
  z_stream& stream = inflate.stream;
  if (int code = inflateInit2(&stream, kGzipWindowBits); code != Z_OK) throw zlibFailure("inflateInit2", code, stream);
  // The trailer's size is modulo 4 GiB and a damaged file could claim anything: grow as data comes,
  // and stop at the limit rather than inflate a bomb.
  std::string out(std::min(maxBytes, std::max<size_t>(bytes.size() * 8, 4096)) + 1, '\0');
  size_t produced = 0;
  size_t consumed = 0;
  while (true) {
    const size_t input = std::min(bytes.size() - consumed, kStep);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + consumed));
    stream.avail_in = uInt(input);
    if (produced == out.size()) out.resize(std::min(out.size() * 2, maxBytes + 1));
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    stream.avail_out = uInt(std::min(out.size() - produced, kStep));
    const uInt outBefore = stream.avail_out;
    const int code = ::inflate(&stream, Z_NO_FLUSH);
    consumed += input - stream.avail_in;
    produced += outBefore - stream.avail_out;
    if (produced > maxBytes) {
      throw PlanError(origin, "$",
                      "the plan is over the limit of " + std::to_string(maxBytes) +
                          " bytes once decompressed (LOOM_MAX_PLAN_BYTES raises it)");
    }
    if (code == Z_STREAM_END) {
      if (consumed == bytes.size()) break;
      // Another gzip member follows, as `cat a.gz b.gz` makes (Python's gzip reads them too).
      if (inflateReset(&stream) != Z_OK) throw zlibFailure("inflateReset", code, stream);
      continue;
    }
    if (code == Z_BUF_ERROR && consumed == bytes.size() && stream.avail_out != 0) {
      throw PlanError(origin, "$", "invalid gzip data: the file ends inside the compressed stream (truncated?)");
    }
    if (code != Z_OK && code != Z_BUF_ERROR) {
      throw PlanError(origin, "$",
                      std::string("invalid gzip data: ") + (stream.msg != nullptr ? stream.msg : zError(code)));
    }
  }
  out.resize(produced);
  return out;
}

}  // namespace loom
