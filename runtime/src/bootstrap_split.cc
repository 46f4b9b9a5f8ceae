#include "loom/bootstrap_split.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include "byte_io.hpp"
#include "loom/error.hpp"
#include "loom/rank_list.hpp"
#include "loom/unique_id.hpp"
#include "setup_tags.hpp"

namespace loom {
namespace {

// The tag of the message that carries a subgroup's rendezvous from its first member to the others.
const uint64_t kRendezvousTag = setupTag(SetupPurpose::kSplit, 1, "subgroup rendezvous");

std::string hostOf(const std::string& hostPort) {
  std::string host = hostPort.substr(0, hostPort.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

SubgroupBootstrap splitBootstrap(Bootstrap& parent, int color, int key) {
  ByteWriter mine;
  mine.put(int32_t(color)).put(int32_t(key));
  const std::vector<Bootstrap::Bytes> all = parent.allGather(mine.take());
  std::vector<std::pair<int, int>> members;  // (key, parent rank) of the ranks of this rank's color
  std::vector<int> badColors;
  for (int rank = 0; rank < int(all.size()); ++rank) {
    ByteReader in(all[rank], "split color and key of rank " + std::to_string(rank));
    const int32_t theirColor = in.get<int32_t>();
    const int32_t theirKey = in.get<int32_t>();
    in.finish();
    if (theirColor < 0 && theirColor != kSplitNoColor) badColors.push_back(rank);
    if (theirColor == color) members.emplace_back(theirKey, rank);
  }
  // Every rank sees every color, so all of them refuse alike and nobody is left waiting.
  if (!badColors.empty()) {
    throw Error(ErrorCategory::kInvalidArgument,
                "split on rank " + std::to_string(parent.rank()) + ": " + rankList(badColors) +
                    " passed a negative color other than NOCOLOR (" + std::to_string(kSplitNoColor) + ")");
  }
  if (color == kSplitNoColor) return {};
  std::sort(members.begin(), members.end());
  std::vector<int> order;
  for (const auto& member : members) order.push_back(member.second);
  return subgroupBootstrap(parent, order);
}

SubgroupBootstrap subgroupBootstrap(Bootstrap& parent, const std::vector<int>& members) {
  const int me = parent.rank();
  const auto mine = std::find(members.begin(), members.end(), me);
  if (mine == members.end()) {
    throw Error(ErrorCategory::kInvalidArgument,
                "subgroup: rank " + std::to_string(me) + " is not among the members it was given");
  }
  for (int rank : members) {
    if (rank < 0 || rank >= parent.worldSize() || std::count(members.begin(), members.end(), rank) != 1) {
      throw Error(ErrorCategory::kInvalidArgument, "subgroup: member " + std::to_string(rank) +
                                                       " is not a distinct rank of the " +
                                                       std::to_string(parent.worldSize()) + "-rank parent");
    }
  }
  const int newRank = int(mine - members.begin());
  SubgroupBootstrap out;
  out.parentRanks = members;
  if (members.size() == 1) {
    out.bootstrap = std::make_shared<Bootstrap>(0, 1, UniqueId::create(hostOf(parent.peerAddress(me))),
                                                parent.timeoutMs());
    return out;
  }
  std::optional<UniqueId> id;
  if (newRank == 0) {
    id = UniqueId::create(hostOf(parent.peerAddress(me)));
    const UniqueId::Bytes bytes = id->toBytes();
    for (size_t i = 1; i < members.size(); ++i) parent.send(members[i], kRendezvousTag, bytes);
  } else {
    id = UniqueId::fromBytes(parent.recv(members[0], kRendezvousTag));
  }
  out.bootstrap = std::make_shared<Bootstrap>(newRank, int(members.size()), *id, parent.timeoutMs());
  return out;
}

}  // namespace loom
