#pragma once

// ncclSend/ncclRecv on Loom (issue 39): the sends and receives of one group (a lone call is a group of
// one) run as counted calls of an all-to-all-v plan of two ranks (Executor::executeCounted), with no
// staging copy: bytes go from the sender's buffer straight into the receiver's (but for an exchange in
// place, one buffer both sent and received into: its bytes to send are first copied into the communicator's
// scratch). On a communicator of two ranks, on that communicator; on a larger one, over a *link* per peer: a
// communicator of the two ranks (Loom's side only, sharing the parent's proxy), made by their first message,
// collectively over the two, with a stream of its own on the GPU, so that a group's rounds with different peers run
// side by side. A link whose ranks sit on different nodes runs the two-node plan of two ranks (port channels: the proxy
// carries the entries and the data); a link with no plan at all (the bundled plans and the JIT off) sends its
// messages to NCCL, on both ends alike.
//
// Pairing is NCCL's: per peer, the k-th send to a peer meets the k-th receive that peer posts from this
// rank. Round k with a peer is the k-th send to it and the k-th receive from it (either may be absent:
// zero bytes), one launch; a group with one message each way, the common case (a pipeline stage's
// exchange, an all-to-all of two ranks), is one launch per peer. Both ends count the same rounds, since
// their sends and receives match, and pick the plan of the round's larger message. Sends to this rank
// itself pair with its receives from itself in the same way and run as local copies on the receive's
// stream, outside the rounds (the peers do not take part in them). Data types may differ within a group:
// only bytes move.
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
