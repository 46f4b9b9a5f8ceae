#pragma once

// ncclSend/ncclRecv on Loom (issue 39), on communicators of two ranks (and, to the rank itself, inside a
// group, of any size: a local copy): the sends and receives of one
// group (a lone call is a group of one) run as counted calls of an all-to-all-v plan of the pair
// (Executor::executeCounted), with no staging copy: bytes go from the sender's buffer straight into the
// receiver's.
//
// Pairing is NCCL's: per peer, the k-th send to a peer meets the k-th receive that peer posts from this
// rank. Round k of a group is the k-th send to the peer and the k-th receive from it (either may be
// absent: zero bytes), one launch; a group with one message each way, the common case (a pipeline stage's
// exchange, an all-to-all of two ranks), is one launch. Both ends count the same rounds, since their
// sends and receives match. Sends to this rank itself pair with its receives from itself in the same
// way and run as local copies on the receive's stream, outside the rounds (the other rank does not take
// part in them). Data types may differ within a group: only bytes move.
//
// A round runs on its send's stream (else its receive's); where the other call of the round names another
// stream, the two wait for each other through events (captured as edges in a CUDA graph).

#include <utility>
#include <vector>

#include "dispatch.hpp"
#include "nccl_comm.hpp"

namespace loom::nccl {

// One communicator's point-to-point calls of a group, in call order, with their decisions (kLoom; those
// held for the JIT, Decision::jitAtGroupEnd, are compiled first). Returns the calls that must go to NCCL
// after all (the JIT had no plan for them): both ends of each such message find the same.
std::vector<const PendingCall*> runPointToPoint(ncclComm& comm,
                                                const std::vector<std::pair<const PendingCall*, Decision>>& calls);

// ncclGather or ncclScatter (`call`, whose decision is kLoom) as the sends and receives between the root and
// each rank, run as above: the root's own piece is a local copy.
void runGatherOrScatter(ncclComm& comm, const PendingCall& call, const Decision& decision);

}  // namespace loom::nccl
