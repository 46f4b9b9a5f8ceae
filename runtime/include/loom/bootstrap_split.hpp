#pragma once

// Subgroups of a job: a new bootstrap over some of a parent bootstrap's ranks, as MPI_Comm_split and
// ncclCommSplit make them. The group's first rank opens a new rendezvous (a UniqueId on its own host)
// and hands it to the other members over the parent's point-to-point messages; the members then join
// it as ranks 0..n-1 of their own bootstrap, which shares nothing with the parent afterwards (either
// may be closed first).

#include <memory>
#include <vector>

#include "loom/bootstrap.hpp"

namespace loom {

// The color of a rank that joins no group (NCCL_SPLIT_NOCOLOR's value).
constexpr int kSplitNoColor = -1;

struct SubgroupBootstrap {
  std::shared_ptr<Bootstrap> bootstrap;  // null when this rank joins no group
  std::vector<int> parentRanks;          // the members' ranks in the parent, in the order of their new ranks
};

// Collective over every rank of `parent`: ranks that pass one color form a group, ranked by key, then
// by parent rank. A negative color other than kSplitNoColor is an InvalidArgument error on every rank.
SubgroupBootstrap splitBootstrap(Bootstrap& parent, int color, int key);

// Collective over `members` only (parent ranks, the new rank order; the same list on every member, and
// it must hold this rank): the ranks left out need not call it, and may be dead (ncclCommShrink).
SubgroupBootstrap subgroupBootstrap(Bootstrap& parent, const std::vector<int>& members);

}  // namespace loom
