#include "point_to_point.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>

#include "goodbye_at_exit.hpp"
#include "jit_plans.hpp"
#include "log.hpp"
#include "loom/bootstrap_split.hpp"
#include "loom/cache_dir.hpp"
#include "loom/device/pair_calls.hpp"
#include "loom/error.hpp"
#include "loom/plan_registry.hpp"
#include "loom/transport.hpp"
#include "result.hpp"

namespace loom::nccl {
namespace {

uint64_t bytesOf(const PendingCall& call) { return call.info.count * ncclTypeBytes(call.info.dataType); }

std::string named(const PendingCall& call) {
  return std::string(call.info.call == Call::kSend ? "ncclSend" : "ncclRecv") + " of " + std::to_string(bytesOf(call)) +
         " bytes";
}

// Makes `waiting` wait for what is enqueued on `done` so far: `comm`'s event (made on first use, then
// reused: a wait takes the record made just before it) recorded on one and waited for by the other (under
// graph capture, an edge between their nodes). A communicator's calls run on one thread at a time.
void follow(ncclComm& comm, cudaStream_t waiting, cudaStream_t done) {
  if (waiting == done) return;
  cudaError_t status = cudaSuccess;
  if (comm.orderEvent == nullptr) status = cudaEventCreateWithFlags(&comm.orderEvent, cudaEventDisableTiming);
  if (status == cudaSuccess) status = cudaEventRecord(comm.orderEvent, done);
  if (status == cudaSuccess) status = cudaStreamWaitEvent(waiting, comm.orderEvent, 0);
  if (status != cudaSuccess) {
    throw Error(ErrorCategory::kCuda,
                std::string("ordering the streams of a send/recv group: ") + cudaGetErrorString(status));
  }
}

// The k-th send to a rank and the k-th receive from it: one launch (or, to this rank itself, one copy).
struct Round {
  const PendingCall* send = nullptr;
  const PendingCall* recv = nullptr;
};

// Pairs the calls per peer in call order. Both ends of a message count it in the same round.
std::vector<Round> rounds(const std::vector<const PendingCall*>& sends, const std::vector<const PendingCall*>& recvs) {
  std::vector<Round> out(std::max(sends.size(), recvs.size()));
  for (size_t k = 0; k < sends.size(); ++k) out[k].send = sends[k];
  for (size_t k = 0; k < recvs.size(); ++k) out[k].recv = recvs[k];
  return out;
}

void runSelf(ncclComm& comm, const std::vector<const PendingCall*>& sends,
             const std::vector<const PendingCall*>& recvs) {
  if (sends.size() != recvs.size()) {
    throw Failure(ncclInvalidUsage, "rank " + std::to_string(comm.rank) + " sends itself " +
                                        std::to_string(sends.size()) + " message(s) in this group but receives " +
                                        std::to_string(recvs.size()) + " from itself; they pair up one for one");
  }
  for (const Round& round : rounds(sends, recvs)) {
    if (bytesOf(*round.send) != bytesOf(*round.recv)) {
      throw Failure(ncclInvalidUsage, "rank " + std::to_string(comm.rank) + ": a " + named(*round.send) +
                                          " to itself meets a " + named(*round.recv) + "; they must be equally long");
    }
    if (!comm.settings.cpuBackend) follow(comm, round.recv->stream, round.send->stream);
    localCopy(comm, round.recv->recv, round.send->send, bytesOf(*round.send), round.recv->stream);
    if (!comm.settings.cpuBackend) follow(comm, round.send->stream, round.recv->stream);
  }
}

bool overlapping(const PendingCall& send, const PendingCall& recv) {
  const auto from = reinterpret_cast<uintptr_t>(send.send), into = reinterpret_cast<uintptr_t>(recv.recv);
  const uint64_t sendBytes = bytesOf(send), recvBytes = bytesOf(recv);
  return sendBytes > 0 && recvBytes > 0 && from < into + recvBytes && into < from + sendBytes;
}

// `comm`'s scratch for staged sends, at least `bytes` long. It grows geometrically, under graph capture too
// (the capture mode is relaxed for this thread around the allocation, which is no stream work).
uint8_t* exchangeScratch(ncclComm& comm, uint64_t bytes) {
  if (comm.settings.cpuBackend) {
    if (comm.hostExchangeScratch.size() < bytes) comm.hostExchangeScratch.resize(bytes);
    return comm.hostExchangeScratch.data();
  }
  if (comm.exchangeScratchBytes < bytes) {
    const uint64_t grown = std::max<uint64_t>(std::bit_ceil(bytes), uint64_t(1) << 20);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    void* scratch = nullptr;
    const cudaError_t status = cudaMalloc(&scratch, grown);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (status != cudaSuccess) {
      throw Error(ErrorCategory::kCuda,
                  "cudaMalloc of " + std::to_string(grown) +
                      " bytes (the scratch of send/recv in place): " + cudaGetErrorString(status));
    }
    comm.exchangeScratch.push_back(scratch);
    comm.exchangeScratchBytes = grown;
  }
  return static_cast<uint8_t*>(comm.exchangeScratch.back());
}

// A group's sends whose bytes a receive of the same group overwrites (nccl-tests' sendrecv in place: one buffer
// sent to one rank and received into from another) are first copied into `comm`'s scratch, each on its call's
// stream, and sent from there (the copies, with the scratch as their buffer, kept in `held`): the plans run out
// of place, and rounds with different peers run side by side. `originals` maps each copy to its call. A peer writes
// into this rank's buffer only once this rank's launch has published its receive entry, which comes after the copy: the
// launch's stream follows the receive's, and a receive on another stream than the send is made to follow the copy.
// Groups of one communicator reuse the scratch, so they are ordered as their streams order them, as NCCL's are.
// `sendLists` are the group's sends to itself and to peers, staged together: they share the scratch.
void stageOverlappingSends(ncclComm& comm, std::initializer_list<std::vector<const PendingCall*>*> sendLists,
                           const std::vector<const PendingCall*>& recvs, std::deque<PendingCall>& held,
                           std::map<const PendingCall*, const PendingCall*>& originals) {
  constexpr uint64_t kAlign = 256;
  const auto aligned = [](uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  std::vector<const PendingCall**> overlapped;
  uint64_t total = 0;
  for (std::vector<const PendingCall*>* sends : sendLists) {
    for (const PendingCall*& send : *sends) {
      if (std::any_of(recvs.begin(), recvs.end(), [&](const PendingCall* recv) { return overlapping(*send, *recv); })) {
        overlapped.push_back(&send);
        total += aligned(bytesOf(*send));
      }
    }
  }
  if (overlapped.empty()) return;
  uint8_t* scratch = exchangeScratch(comm, total);
  uint64_t at = 0;
  for (const PendingCall** send : overlapped) {
    PendingCall& staged = held.emplace_back(**send);
    staged.send = scratch + at;
    localCopy(comm, scratch + at, (*send)->send, bytesOf(staged), staged.stream);
    for (const PendingCall* recv : recvs) {
      if (!comm.settings.cpuBackend && overlapping(**send, *recv)) follow(comm, recv->stream, staged.stream);
    }
    at += aligned(bytesOf(staged));
    originals[&staged] = *send;
    *send = &staged;
  }
}

// The counted call of a round of `comm` (the communicator of two ranks, or a link): this rank's send to
// and receive from the other rank.
CountedCall countedCallOf(const ncclComm& comm, const Round& round) {
  const int peer = 1 - comm.rank;
  CountedCall call;
  call.sends.assign(2, MessageEntry{});
  call.receives.assign(2, MessageEntry{});
  if (round.send) {
    call.input = round.send->send;
    call.inputBytes = bytesOf(*round.send);
    call.sends[size_t(peer)] = {0, call.inputBytes};
  }
  if (round.recv) {
    call.output = round.recv->recv;
    call.outputBytes = bytesOf(*round.recv);
    call.receives[size_t(peer)] = {0, call.outputBytes};
  }
  return call;
}

// The streams of a group's rounds' calls, each once, in call order (mostly one).
std::vector<cudaStream_t> callStreams(const std::vector<const Round*>& rounds) {
  std::vector<cudaStream_t> streams;
  for (const Round* round : rounds) {
    for (const PendingCall* call : {round->send, round->recv}) {
      if (call && std::find(streams.begin(), streams.end(), call->stream) == streams.end()) {
        streams.push_back(call->stream);
      }
    }
  }
  return streams;
}

// One round of the communicator of two ranks, on the round's first call's stream, which first waits for the
// other call's stream and which it then waits for.
void runRound(ncclComm& comm, const Round& round, const Plan& plan) {
  const CountedCall call = countedCallOf(comm, round);
  if (comm.settings.cpuBackend) {
    comm.executor->executeCounted(plan, call, nullptr);
    return;
  }
  // The calls' streams, each once (a round's two calls are mostly on one), null (the legacy default stream)
  // included: no allocation on this path, which every send/recv of a pair takes.
  cudaStream_t streams[2] = {(round.send ? round.send : round.recv)->stream, nullptr};
  const int count = round.send && round.recv && round.recv->stream != streams[0] ? 2 : 1;
  if (count == 2) streams[1] = round.recv->stream;
  if (count == 2) follow(comm, streams[0], streams[1]);
  comm.executor->executeCounted(plan, call, streams[0]);
  if (count == 2) follow(comm, streams[1], streams[0]);
}

// A round of a group on a communicator of more than two ranks: over the link to its peer, with its plan.
struct LinkRound {
  ncclComm* link;
  int peer;  // in the group's communicator
  Round round;
  std::shared_ptr<const Plan> plan;
};

// The streams of the calls of a group's rounds over links, each once, in call order.
std::vector<cudaStream_t> callStreamsOf(const std::vector<LinkRound>& rounds) {
  std::vector<const Round*> each;
  for (const LinkRound& r : rounds) each.push_back(&r.round);
  return callStreams(each);
}

// Runs `launch`, a rank's launches of a group's rounds with `rounds`' peers, with a TRACE line before and after
// ("setting up", "launched"): they tell a rank that never launched from one whose kernel waits.
template <typename Launch>
void traceLaunches(const ncclComm& comm, const char* how, const std::vector<LinkRound>& rounds, Launch&& launch) {
  if (!logEnabled(LogLevel::kTrace)) {
    launch();
    return;
  }
  std::string group = "rank " + std::to_string(comm.rank) + ": " + how + " with ranks";
  for (const LinkRound& r : rounds) group += " " + std::to_string(r.peer);
  logLine(LogLevel::kTrace, comm.cudaDevice, group + ": setting up");
  launch();
  logLine(LogLevel::kTrace, comm.cudaDevice, group + ": launched");
}

// The k-th rounds of a group's peers (peers ascending), one per link, on its link's stream, side by side:
// every link's stream first waits for all the calls' streams, then each round launches, then the calls'
// streams wait for every link. (Each link waiting for the calls' streams after the previous link's launch
// would run them one after another, and chain each link's wait for its peer behind the one before.)
void runRoundsSideBySide(ncclComm& comm, const std::vector<LinkRound>& rounds) {
  countLaunches(comm, rounds.size());
  if (comm.settings.cpuBackend) {
    for (const LinkRound& r : rounds)
      r.link->executor->executeCounted(*r.plan, countedCallOf(*r.link, r.round), nullptr);
    return;
  }
  const std::vector<cudaStream_t> streams = callStreamsOf(rounds);
  for (const LinkRound& r : rounds) {
    for (cudaStream_t callStream : streams) follow(*r.link, r.link->linkStream, callStream);
  }
  traceLaunches(comm, "side by side", rounds, [&] {
    for (const LinkRound& r : rounds) {
      r.link->executor->executeCounted(*r.plan, countedCallOf(*r.link, r.round), r.link->linkStream);
    }
  });
  for (const LinkRound& r : rounds) {
    for (cudaStream_t callStream : streams) follow(*r.link, callStream, r.link->linkStream);
  }
}

// The k-th rounds of a group's peers (peers ascending), one per link: one launch on the first call's stream
// (Executor::executeCountedGroup), which first waits for the other calls' streams and which they then wait
// for. Rounds that do not fit one launch (plans of different block sizes: packets and not; more peers than
// a launch takes), and every round unless LOOM_P2P_ONE_LAUNCH is on, run side by side on their links' streams.
void runLinkRounds(ncclComm& comm, const std::vector<LinkRound>& rounds) {
  const bool oneLaunch = comm.settings.p2pOneLaunch && rounds.size() <= device::kMaxGroupedCalls &&
                         std::all_of(rounds.begin(), rounds.end(), [&](const LinkRound& r) {
                           return r.plan->threadsPerBlock == rounds[0].plan->threadsPerBlock;
                         });
  if (!oneLaunch) {
    runRoundsSideBySide(comm, rounds);
    return;
  }
  std::vector<GroupedCountedCall> calls;
  calls.reserve(rounds.size());
  for (const LinkRound& r : rounds)
    calls.push_back({r.link->executor.get(), r.plan.get(), countedCallOf(*r.link, r.round)});
  countLaunches(comm, 1);
  std::vector<cudaStream_t> streams{nullptr};  // the CPU backend's launches take none
  if (!comm.settings.cpuBackend) {
    streams = callStreamsOf(rounds);
    for (cudaStream_t callStream : streams) follow(comm, streams[0], callStream);
  }
  traceLaunches(comm, "one launch", rounds, [&] { Executor::executeCountedGroup(calls, streams[0]); });
  if (comm.settings.cpuBackend) return;
  for (cudaStream_t callStream : streams) follow(comm, callStream, streams[0]);
}

// The round's larger message, whose plan runs the round: the peer picks the same one (its send is this
// rank's receive).
const PendingCall& largerOf(const Round& round) {
  if (!round.send || (round.recv && bytesOf(*round.recv) > bytesOf(*round.send))) return *round.recv;
  return *round.send;
}

// The link of this rank and `peer`, made now if this is their first message: collective over the two
// (they meet over the parent's bootstrap). Its ranks: the lower parent rank is 0.
ncclComm& linkTo(ncclComm& comm, int peer) {
  std::unique_ptr<ncclComm>& link = comm.links[peer];
  if (link) return *link;
  auto made = std::make_unique<ncclComm>();
  made->origin = "link of comm " + std::to_string(comm.serial) + " between ranks " +
                 std::to_string(std::min(comm.rank, peer)) + " and " + std::to_string(std::max(comm.rank, peer));
  made->settings = comm.settings;
  made->cudaDevice = comm.cudaDevice;
  made->worldSize = 2;
  made->bootstrap =
      subgroupBootstrap(*comm.bootstrap, {std::min(comm.rank, peer), std::max(comm.rank, peer)}).bootstrap;
  made->rank = made->bootstrap->rank();
  made->communicator =
      std::make_shared<Communicator>(made->bootstrap, IbConfig::fromEnvironment(),
                                     comm.settings.cpuBackend ? Communicator::kHostOnly : comm.cudaDevice);
  made->executor = std::make_unique<Executor>(made->communicator, comm.executor.get());
  made->ranksPerNode = uint32_t(made->communicator->localWorldSize());
  if (!comm.settings.cpuBackend) {
    const cudaError_t status = cudaStreamCreateWithFlags(&made->linkStream, cudaStreamNonBlocking);
    if (status != cudaSuccess) {
      throw Error(ErrorCategory::kCuda,
                  std::string("cudaStreamCreateWithFlags (a send/recv link's stream): ") + cudaGetErrorString(status));
    }
  }
  sayGoodbyeAtExit(made->bootstrap);
  made->ready = true;
  link = std::move(made);
  return *link;
}

// The eager packet plan for a round of `pair` (two ranks of one node) whose larger message is at most
// LOOM_P2P_PACKET_BYTES, else null: both ends see the same larger message, so both pick it.
std::shared_ptr<const Plan> packetPlanFor(ncclComm& pair, const PendingCall& larger) {
  const uint64_t limit = pair.settings.p2pPacketBytes;
  if (limit == 0 || pair.worldSize != 2 || pair.ranksPerNode != 2 || bytesOf(larger) > limit) return nullptr;
  return usePacketPlan(pair, limit);
}

// The plan of a round over a link, chosen by its larger message (the peer's choice too): a registered
// all-to-all-v plan of the two ranks (bundled for one node and for two nodes of one rank), else the link's
// JIT plan (collective over the link); null when there is none, and the round goes to NCCL.
std::shared_ptr<const Plan> linkPlan(ncclComm& link, const PendingCall& larger, Decision& decision) {
  CallInfo info = larger.info;
  info.worldSize = 2;
  info.ranksPerNode = link.ranksPerNode;
  info.grouped = false;
  info.toSelf = false;
  if (link.executor) info.placement = link.executor->placement();
  decision = Decision{};
  decision.collective = Collective::kAllToAllV;
  decision.dataType = DataType::kFloat32;
  const SelectionRequest request = selectionRequestFor(info, decision.collective, decision.dataType, decision.op);
  decision.plan = packetPlanFor(link, larger);
  if (!decision.plan) decision.plan = PlanRegistry::global().select(request);
  decision.messageBytes = request.messageBytes;
  if (!decision.plan && link.settings.jit && defaultPlansEnabled()) useJitPlan(link, info, decision);
  if (!decision.plan) return nullptr;
  decision.route = Route::kLoom;
  decision.reason = Reason::kPlan;
  return decision.plan;
}

// The rounds with each peer over its link. Every rank takes its pairs in one global order (by lower, then
// higher rank), so with calls that block the first pair pending anywhere can always go on: first each link
// and its plans (made at a pair's first message; a JIT plan is compiled over the link), peers ascending;
// then the k-th rounds of every peer together, k ascending (their setups peers ascending, then one launch).
// Calls whose link has no plan are returned.
std::vector<const PendingCall*> runOverLinks(ncclComm& comm, const std::vector<const PendingCall*>& sends,
                                             const std::vector<const PendingCall*>& recvs) {
  std::map<int, std::pair<std::vector<const PendingCall*>, std::vector<const PendingCall*>>> byPeer;
  for (const PendingCall* call : sends) byPeer[call->peer].first.push_back(call);
  for (const PendingCall* call : recvs) byPeer[call->peer].second.push_back(call);
  std::vector<const PendingCall*> forwarded;
  std::vector<std::vector<LinkRound>> byIndex;  // [k]: every peer's k-th round, peers ascending
  for (const auto& [peer, messages] : byPeer) {
    ncclComm& link = linkTo(comm, peer);
    const std::vector<Round> peerRounds = rounds(messages.first, messages.second);
    if (byIndex.size() < peerRounds.size()) byIndex.resize(peerRounds.size());
    for (size_t k = 0; k < peerRounds.size(); ++k) {
      const Round& round = peerRounds[k];
      Decision decision;
      std::shared_ptr<const Plan> plan = linkPlan(link, largerOf(round), decision);
      if (!plan) {
        Decision forwarding = decision;
        forwarding.route = comm.realComm != nullptr ? Route::kForward : Route::kFail;
        for (const PendingCall* call : {round.send, round.recv}) {
          if (!call) continue;
          noteCall(comm, call->info, forwarding);
          if (forwarding.route == Route::kFail) {
            throw Failure(ncclInvalidUsage, describe(call->info, forwarding) + ": " + comm.realMissing);
          }
          forwarded.push_back(call);
        }
        continue;
      }
      for (const PendingCall* call : {round.send, round.recv}) {
        if (call) noteCall(comm, call->info, decision);
      }
      byIndex[k].push_back({&link, peer, round, std::move(plan)});
    }
  }
  for (const std::vector<LinkRound>& kth : byIndex) {
    if (!kth.empty()) runLinkRounds(comm, kth);
  }
  return forwarded;
}

}  // namespace

std::vector<const PendingCall*> runPointToPoint(ncclComm& comm,
                                                const std::vector<std::pair<const PendingCall*, Decision>>& calls) {
  std::vector<const PendingCall*> forwarded;
  std::vector<const PendingCall*> selfSends, selfRecvs, peerSends, peerRecvs;
  std::vector<std::pair<const PendingCall*, Decision>> resolved = calls;
  for (auto& [call, decision] : resolved) {
    // A plan still to be compiled: collective over the pair, which holds the same calls in the same order.
    if (decision.jitAtGroupEnd && !resolveDeferredJit(comm, *call, decision)) {
      forwarded.push_back(call);
      continue;
    }
    const bool sending = call->info.call == Call::kSend;
    if (call->info.toSelf) {
      (sending ? selfSends : selfRecvs).push_back(call);
    } else {
      (sending ? peerSends : peerRecvs).push_back(call);
    }
  }
  std::deque<PendingCall> staged;
  std::map<const PendingCall*, const PendingCall*> originals;
  std::vector<const PendingCall*> allRecvs = peerRecvs;
  allRecvs.insert(allRecvs.end(), selfRecvs.begin(), selfRecvs.end());
  stageOverlappingSends(comm, {&selfSends, &peerSends}, allRecvs, staged, originals);
  runSelf(comm, selfSends, selfRecvs);
  if (comm.worldSize != 2) {
    // What goes to NCCL is the caller's call (the staged copies go with this function), in place as it was.
    for (const PendingCall* call : runOverLinks(comm, peerSends, peerRecvs)) {
      const auto original = originals.find(call);
      forwarded.push_back(original != originals.end() ? original->second : call);
    }
    return forwarded;
  }
  for (const Round& round : rounds(peerSends, peerRecvs)) {
    const PendingCall* larger = &largerOf(round);
    if (const auto original = originals.find(larger); original != originals.end()) larger = original->second;
    countLaunches(comm, 1);
    if (const std::shared_ptr<const Plan> packets = packetPlanFor(comm, *larger)) {
      runRound(comm, round, *packets);
      continue;
    }
    for (const auto& [call, decision] : resolved) {
      if (call == larger) runRound(comm, round, *decision.plan);
    }
  }
  return forwarded;
}

void runGatherOrScatter(ncclComm& comm, const PendingCall& call, const Decision& decision) {
  const bool gather = call.info.call == Call::kGather;
  const uint64_t bytes = bytesOf(call);
  const int root = call.info.root;
  std::vector<PendingCall> parts;
  auto part = [&](Call kind, int peer, const void* send, void* recv) {
    PendingCall p;
    p.info = call.info;
    p.info.call = kind;
    p.info.toSelf = peer == comm.rank;
    p.peer = peer;
    p.send = send;
    p.recv = recv;
    p.stream = call.stream;
    parts.push_back(p);
  };
  // Rank r's piece of the root's buffer: bytes [r x bytes, (r + 1) x bytes).
  const auto piece = [&](const void* buffer, int rank) {
    return static_cast<uint8_t*>(const_cast<void*>(buffer)) + uint64_t(rank) * bytes;
  };
  if (comm.rank == root) {
    for (int rank = 0; rank < comm.worldSize; ++rank) {
      if (gather) {
        if (rank == root) part(Call::kSend, root, call.send, nullptr);
        part(Call::kRecv, rank, nullptr, piece(call.recv, rank));
      } else {
        part(Call::kSend, rank, piece(call.send, rank), nullptr);
        if (rank == root) part(Call::kRecv, root, nullptr, call.recv);
      }
    }
  } else {
    gather ? part(Call::kSend, root, call.send, nullptr) : part(Call::kRecv, root, nullptr, call.recv);
  }
  std::vector<std::pair<const PendingCall*, Decision>> calls;
  for (const PendingCall& p : parts) calls.emplace_back(&p, decision);
  // On more than two ranks a link with no plan (the bundled plans and the JIT off) hands its messages back.
  for (const PendingCall* forwarded : runPointToPoint(comm, calls)) forward(comm, *forwarded);
}

}  // namespace loom::nccl
