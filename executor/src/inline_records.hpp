#pragma once

// The inline program of a call context (loom/device/inline_program.hpp): a specialised program small
// enough to travel in the inline kernel's parameters, with each operand's final address computed on the
// host at every launch (the call's buffers and peer shifts change between calls; the records do not).

#include <vector>

#include "loom/device/inline_program.hpp"
#include "loom/device/program.hpp"
#include "resolve.hpp"

namespace loom {

class InlineRecords {
 public:
  // Empty unless `resolved` is specialised (specialize.hpp) through and through: every op a kCopy,
  // kFastTransfer, kOneShot or kNop, and within device::kMaxInline* blocks, ops and operands, with
  // byte counts that fit 32 bits.
  explicit InlineRecords(const ResolvedProgram& resolved);

  bool empty() const { return records_.ops == 0; }
  // The records with this call's addresses: `program` as it will be launched (buffers, peer shifts),
  // `views` its channel views in host memory.
  const device::InlineProgram& forCall(const device::Program& program, const device::ChannelView* views);

 private:
  device::InlineProgram records_{};
  std::vector<device::Operand> operands_;  // records_.operand[i] is operands_[i]'s address
};

}  // namespace loom
