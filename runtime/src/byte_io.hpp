#pragma once

// Little-endian encoding of the small setup records ranks exchange (registrations, connection and
// semaphore info). The reader checks every length, so a short or corrupt record is an
// InvalidArgument error naming the record, never a read past the end.

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/error.hpp"

namespace loom {

namespace byte_io {
template <typename T, bool = std::is_enum_v<T>>
struct Raw {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
struct Raw<T, true> {
  using type = std::make_unsigned_t<std::underlying_type_t<T>>;
};
}  // namespace byte_io

class ByteWriter {
 public:
  template <typename T>
  ByteWriter& put(T value) {
    static_assert(std::is_integral_v<T> || std::is_enum_v<T>);
    using U = typename byte_io::Raw<T>::type;
    U raw = static_cast<U>(value);
    for (size_t i = 0; i < sizeof(U); ++i) bytes_.push_back(static_cast<uint8_t>(raw >> (8 * i)));
    return *this;
  }
  ByteWriter& putBytes(std::span<const uint8_t> data) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    return *this;
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

  template <typename T>
  T get() {
    static_assert(std::is_integral_v<T> || std::is_enum_v<T>);
    using U = typename byte_io::Raw<T>::type;
    need(sizeof(U));
    U raw = 0;
    for (size_t i = 0; i < sizeof(U); ++i) raw |= static_cast<U>(U(bytes_[offset_ + i]) << (8 * i));
    offset_ += sizeof(U);
    return static_cast<T>(raw);
  }
  void getBytes(std::span<uint8_t> out) {
    need(out.size());
    std::memcpy(out.data(), bytes_.data() + offset_, out.size());
    offset_ += out.size();
  }
  // Throws unless every byte was consumed.
  void finish() const {
    if (offset_ != bytes_.size()) {
      throw Error(ErrorCategory::kInvalidArgument, what_ + ": " + std::to_string(bytes_.size() - offset_) +
                                                       " unexpected bytes after the end of the record");
    }
  }

 private:
  void need(size_t count) const {
    if (bytes_.size() - offset_ < count) {
      throw Error(ErrorCategory::kInvalidArgument, what_ + ": record truncated at byte " + std::to_string(offset_) +
                                                       " of " + std::to_string(bytes_.size()));
    }
  }
  std::span<const uint8_t> bytes_;
  size_t offset_ = 0;
  std::string what_;
};

}  // namespace loom
