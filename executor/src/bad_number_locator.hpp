#pragma once

// simdjson refuses a number it cannot represent (an integer past 64 bits, 1e400) with NUMBER_ERROR
// but no position, which in a large plan names nothing. Only when that happens, the document is
// walked again with the On-Demand API to find the first such number and its JSON path, so the error
// points at it the way the schema check does.

#include <simdjson.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "json_path.hpp"

namespace loom {

struct BadNumber {
  std::string path;
  std::string token;
};

namespace bad_number_detail {

// Same nesting limit as the DOM parser's default, so the walk never recurses deeper than the parse.
inline constexpr size_t kMaxDepth = simdjson::DEFAULT_MAX_DEPTH;

// True for text that follows the JSON number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
// A malformed token (01, 1., -) is a syntax error, reported without a path like any other.
inline bool isJsonNumberText(std::string_view text) {
  size_t i = 0;
  auto digits = [&] {
    size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i > start;
  };
  if (i < text.size() && text[i] == '-') ++i;
  if (i < text.size() && text[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == text.size();
}

inline std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\n' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  return text;
}

enum class Walk { kGoOn, kFound, kStop };

// kFound fills `out` with the first bad number. kStop: the walk met a malformed number or any other
// error first; that one is what the parser refused, and it has no path to report.
inline Walk find(simdjson::ondemand::value value, const JsonPath& path, size_t depth, BadNumber& out) {
  using simdjson::ondemand::json_type;
  json_type type;
  if (depth > kMaxDepth || value.type().get(type)) return Walk::kStop;
  switch (type) {
    case json_type::object: {
      simdjson::ondemand::object object;
      if (value.get_object().get(object)) return Walk::kStop;
      for (auto member : object) {
        simdjson::ondemand::field field;
        std::string_view key;
        if (std::move(member).get(field) || field.unescaped_key().get(key)) return Walk::kStop;
        if (Walk walk = find(field.value(), path.field(key), depth + 1, out); walk != Walk::kGoOn) return walk;
      }
      return Walk::kGoOn;
    }
    case json_type::array: {
      simdjson::ondemand::array array;
      if (value.get_array().get(array)) return Walk::kStop;
      size_t index = 0;
      for (auto element : array) {
        simdjson::ondemand::value item;
        if (std::move(element).get(item)) return Walk::kStop;
        if (Walk walk = find(item, path.at(index++), depth + 1, out); walk != Walk::kGoOn) return walk;
      }
      return Walk::kGoOn;
    }
    case json_type::number: {
      std::string_view token = trimmed(value.raw_json_token());
      simdjson::ondemand::number number;
      if (!value.get_number().get(number)) return Walk::kGoOn;
      if (!isJsonNumberText(token)) return Walk::kStop;
      out = BadNumber{path.str(), std::string(token.substr(0, 64)) + (token.size() > 64 ? "..." : "")};
      return Walk::kFound;
    }
    default:
      return Walk::kGoOn;
  }
}

}  // namespace bad_number_detail

// The path and text of the first well-formed number in `json` that simdjson cannot represent.
inline std::optional<BadNumber> locateBadNumber(simdjson::padded_string_view json) {
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document document;
  if (parser.iterate(json).get(document)) return std::nullopt;
  simdjson::ondemand::value root;
  BadNumber found;
  // A scalar document is not a value in On-Demand; a plan is an object, so only containers matter.
  if (document.get_value().get(root)) return std::nullopt;
  if (bad_number_detail::find(root, JsonPath(), 0, found) == bad_number_detail::Walk::kFound) return found;
  return std::nullopt;
}

}  // namespace loom
