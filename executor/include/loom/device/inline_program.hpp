#pragma once

// A small specialised program carried in the inline kernel's parameters (executor/src/inline_records.cc
// builds it): op headers and final operand addresses, so a block starts moving data after one read of
// its call count instead of a chain of dependent reads (block start, op record, operand records,
// channel view, peer shift). Only programs whose ops are all specialised data ops, and that fit the
// bounds below, are inlined; the rest run from Program's tables.

#include <cstdint>

#include "loom/device/program.hpp"

namespace loom::device {

// Bounds that keep the kernel's parameters (Program and InlineProgram together) under the 4 KiB
// every CUDA version accepts: an LL all-reduce of 2 ranks with 8 instances needs 16 blocks, 16 ops,
// 64 operands.
inline constexpr uint32_t kMaxInlineBlocks = 32;
inline constexpr uint32_t kMaxInlineOps = 32;
inline constexpr uint32_t kMaxInlineOperands = 96;
// The inline kernel's largest block: half the interpreter's 1024, so each thread may use 128 registers
// and the unrolled handlers, whose operands live in registers, do not spill.
inline constexpr uint32_t kMaxInlineThreads = 512;

struct InlineOp {
  OpCode code;                // kCopy, kFastTransfer, kOneShot or kNop
  uint8_t flags;              // Op::flags
  uint8_t srcs;               // operands [first, first + srcs) are sources, then `dsts` destinations
  uint8_t dsts;
  uint8_t packetSources;      // the last this many sources are LL packets
  uint8_t inputDestinations;  // kOneShot: the last this many destinations get source 0 as it is
  uint8_t packetDestinations; // bit i: destination i holds LL packets
  uint8_t first;
  uint32_t bytes;
  uint32_t planOp;
};

struct InlineOperand {
  uint64_t address;    // this call's address of the operand (even calls)
  uint64_t oddOffset;  // added on odd calls: the second half of double-buffered LL scratch
};

struct InlineProgram {
  uint32_t ops;                              // 0: the program is not inlined
  uint8_t blockOps[kMaxInlineBlocks + 1];    // block b runs ops [blockOps[b], blockOps[b + 1])
  InlineOp op[kMaxInlineOps];
  InlineOperand operand[kMaxInlineOperands];
};

static_assert(sizeof(Program) + sizeof(InlineProgram) <= 4000, "the inline kernel's parameters must stay under 4 KiB");

}  // namespace loom::device
