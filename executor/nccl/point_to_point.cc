#include "point_to_point.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "loom/error.hpp"
#include "result.hpp"

namespace loom::nccl {
namespace {

uint64_t bytesOf(const PendingCall& call) { return call.info.count * ncclTypeBytes(call.info.dataType); }

std::string named(const PendingCall& call) {
  return std::string(call.info.call == Call::kSend ? "ncclSend" : "ncclRecv") + " of " + std::to_string(bytesOf(call)) +
         " bytes";
}

// Makes `main` wait for what is enqueued on `other` so far, or `other` for `main`: an event recorded on
// one and waited for by the other (under graph capture, an edge between their nodes).
void follow(cudaStream_t waiting, cudaStream_t done) {
  if (waiting == done) return;
  cudaEvent_t event = nullptr;
  cudaError_t status = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (status == cudaSuccess) status = cudaEventRecord(event, done);
  if (status == cudaSuccess) status = cudaStreamWaitEvent(waiting, event, 0);
  if (event != nullptr) cudaEventDestroy(event);  // released once the wait has happened
  if (status != cudaSuccess) {
    throw Error(ErrorCategory::kCuda,
                std::string("ordering the streams of a send/recv group: ") + cudaGetErrorString(status));
  }
}

// The k-th send to a rank and the k-th receive from it: one launch (or, to this rank itself, one copy).
struct Round {
  const PendingCall* send = nullptr;
  const PendingCall* recv = nullptr;
  const Decision* plan = nullptr;  // the decision whose plan runs the round: its larger message's
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
    if (!comm.settings.cpuBackend) follow(round.recv->stream, round.send->stream);
    localCopy(comm, round.recv->recv, round.send->send, bytesOf(*round.send), round.recv->stream);
    if (!comm.settings.cpuBackend) follow(round.send->stream, round.recv->stream);
  }
}

void runRound(ncclComm& comm, const Round& round) {
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
  const PendingCall& first = round.send ? *round.send : *round.recv;
  const PendingCall* other = round.send && round.recv ? round.recv : nullptr;
  const bool gpu = !comm.settings.cpuBackend;
  if (gpu && other) follow(first.stream, other->stream);
  comm.executor->executeCounted(*round.plan->plan, call, first.stream);
  if (gpu && other) follow(other->stream, first.stream);
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
  runSelf(comm, selfSends, selfRecvs);
  if ((!peerSends.empty() || !peerRecvs.empty()) && comm.worldSize != 2) {
    throw Failure(ncclInternalError, "send/recv between ranks runs on Loom on communicators of two ranks only");
  }
  std::vector<Round> peerRounds = rounds(peerSends, peerRecvs);
  for (Round& round : peerRounds) {
    // The plan of the round's larger message, which the peer picks too (its send is this rank's receive).
    const PendingCall* larger = round.send;
    if (!larger || (round.recv && bytesOf(*round.recv) > bytesOf(*round.send))) larger = round.recv;
    for (const auto& [call, decision] : resolved) {
      if (call == larger) round.plan = &decision;
    }
    runRound(comm, round);
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
  runPointToPoint(comm, calls);
}

}  // namespace loom::nccl
