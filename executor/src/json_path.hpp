#pragma once

// A JSON path kept as a chain of stack frames, turned into text only when an error is reported, so
// decoding a large plan builds no strings on the success path.

#include <cstddef>
#include <string>
#include <string_view>

namespace loom {

class JsonPath {
 public:
  JsonPath() = default;  // the document itself, written "$"

  JsonPath field(std::string_view key) const { return JsonPath(this, key, 0, false); }
  JsonPath at(size_t index) const { return JsonPath(this, {}, index, true); }

  std::string str() const {
    if (parent_ == nullptr) return "$";
    std::string prefix = parent_->parent_ == nullptr ? std::string() : parent_->str();
    if (isIndex_) return prefix + "[" + std::to_string(index_) + "]";
    return prefix.empty() ? std::string(key_) : prefix + "." + std::string(key_);
  }

 private:
  JsonPath(const JsonPath* parent, std::string_view key, size_t index, bool isIndex)
      : parent_(parent), key_(key), index_(index), isIndex_(isIndex) {}

  const JsonPath* parent_ = nullptr;
  std::string_view key_;
  size_t index_ = 0;
  bool isIndex_ = false;
};

}  // namespace loom
