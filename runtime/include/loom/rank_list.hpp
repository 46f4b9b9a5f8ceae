#pragma once

// "rank 3" or "ranks 1, 4, 7" (the first 16, then how many more): for messages that name ranks.

#include <string>
#include <vector>

namespace loom {

inline std::string rankList(const std::vector<int>& ranks) {
  constexpr size_t kShown = 16;
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kShown) text += " and " + std::to_string(ranks.size() - kShown) + " more";
  return text;
}

}  // namespace loom
