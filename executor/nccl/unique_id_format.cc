#include "unique_id_format.hpp"

#include <cstring>
#include <span>
#include <string>

#include "loom/error.hpp"

namespace loom::nccl {
namespace {

constexpr size_t kVersionOffset = 8;
constexpr size_t kLoomIdOffset = 16;
static_assert(kLoomIdOffset + UniqueId::kBytes <= NCCL_UNIQUE_ID_BYTES);

}  // namespace

ncclUniqueId encodeUniqueId(const UniqueId& id) {
  ncclUniqueId out;
  std::memset(out.internal, 0, sizeof(out.internal));
  std::memcpy(out.internal, kUniqueIdMagic, sizeof(kUniqueIdMagic));
  out.internal[kVersionOffset] = char(kUniqueIdVersion);
  const UniqueId::Bytes bytes = id.toBytes();
  std::memcpy(out.internal + kLoomIdOffset, bytes.data(), bytes.size());
  return out;
}

UniqueId decodeUniqueId(const ncclUniqueId& id) {
  if (std::memcmp(id.internal, kUniqueIdMagic, sizeof(kUniqueIdMagic)) != 0) {
    throw Error(ErrorCategory::kInvalidArgument,
                "commId: not an id from Loom's ncclGetUniqueId (no LOOMNCCL mark); the rank that made it did not "
                "load libloom_nccl.so: preload it in every rank");
  }
  const auto version = uint8_t(id.internal[kVersionOffset]);
  if (version != kUniqueIdVersion) {
    throw Error(ErrorCategory::kInvalidArgument, "commId: format version " + std::to_string(version) +
                                                     ", this library reads version " +
                                                     std::to_string(kUniqueIdVersion) + "; use one Loom on every rank");
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(id.internal) + kLoomIdOffset;
  try {
    return UniqueId::fromBytes(std::span<const uint8_t>(bytes, UniqueId::kBytes));
  } catch (const Error& error) {
    throw Error(ErrorCategory::kInvalidArgument, std::string("commId: ") + error.what());
  }
}

}  // namespace loom::nccl
