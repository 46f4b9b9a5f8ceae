#pragma once

// A board in host memory where the ranks of one host post small records and read every other's: an
// all-gather without the bootstrap's TCP round trip (a store and a few cache-line reads instead of a
// message per peer). The executor posts each call's shape and buffers on it (call_agreement.hpp).
//
// Each rank owns two slots, written in turn: the record of exchange k goes into slot k % 2 and is
// published by storing k into the slot's sequence word after the record. A rank reads a peer's slot
// once the sequence says k. A rank reuses a slot only two exchanges later, which needs every peer's
// record of the exchange in between, and a peer posts that only after it read this one: no record is
// overwritten while someone still reads it. Slots live in shared host memory when a rank of this host
// runs in another process (each peer maps them), otherwise in plain host memory.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "loom/communicator.hpp"

namespace loom {

class HostBoard {
 public:
  static constexpr uint32_t kMaxRecordBytes = 248;

  // Collective over every rank of `communicator`, which must all run on one host: each rank makes its
  // slots and sends them to every peer on `tag` (Communicator::sendMemory), and maps theirs.
  HostBoard(Communicator& communicator, uint32_t recordBytes, uint64_t tag);
  ~HostBoard();
  HostBoard(const HostBoard&) = delete;
  HostBoard& operator=(const HostBoard&) = delete;

  // Collective: posts `mine` (recordBytes long) and returns every rank's record, by rank. Waits spin
  // and, about every 100 ms, run the bootstrap's interrupt check (Communicator::abort and Ctrl-C end
  // them); past the bootstrap's timeout a Timeout error names the ranks that did not post and those
  // whose process is gone. After a failure the board refuses further exchanges.
  std::vector<std::vector<uint8_t>> allGather(std::span<const uint8_t> mine);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
