#include "call_agreement.hpp"

#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "loom/error.hpp"

namespace loom {
namespace {

constexpr uint32_t kMagic = 0x4c43414c;  // "LCAL"

// The fixed-size record one rank sends; anything of another size is another setup step.
struct Record {
  uint32_t magic = kMagic;
  uint8_t type = 0;
  uint8_t op = 0;
  uint8_t hasBuffers = 0;
  uint8_t reserved = 0;
  uint64_t planHash = 0;
  uint64_t messageBytes = 0;
  RankBuffers buffers;
};

Record recordOf(const CallShape& shape, const std::optional<RankBuffers>& buffers) {
  Record record;
  record.type = uint8_t(shape.type);
  record.op = uint8_t(shape.op);
  record.hasBuffers = buffers.has_value();
  record.buffers = buffers.value_or(RankBuffers{});
  record.planHash = shape.planHash;
  record.messageBytes = shape.messageBytes;
  return record;
}

std::string hexHash(uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::string describe(const Record& record) {
  return "plan " + hexHash(record.planHash) + ", " + std::to_string(record.messageBytes) + " bytes of " +
         std::string(dataTypeName(DataType(record.type))) + ", op " + std::string(reduceOpName(ReduceOp(record.op)));
}

bool sameCall(const Record& a, const Record& b) {
  return a.magic == b.magic && a.planHash == b.planHash && a.messageBytes == b.messageBytes && a.type == b.type &&
         a.op == b.op && a.hasBuffers == b.hasBuffers;
}

}  // namespace

std::unique_ptr<HostBoard> makeCallBoard(Communicator& communicator, uint64_t tag) {
  return std::make_unique<HostBoard>(communicator, uint32_t(sizeof(Record)), tag);
}

std::vector<RankBuffers> agreeOnCall(Communicator& communicator, HostBoard* board, const Plan& plan,
                                     const CallShape& mine, const std::optional<RankBuffers>& buffers) {
  const Record record = recordOf(mine, buffers);
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(&record), sizeof(record));
  const std::vector<Bootstrap::Bytes> all = board ? board->allGather(bytes) : communicator.bootstrap().allGather(bytes);
  std::string differing;
  std::vector<RankBuffers> everyRank;
  for (size_t r = 0; r < all.size(); ++r) {
    Record theirs;
    if (all[r].size() != sizeof(theirs)) {
      differing +=
          "; rank " + std::to_string(r) + " is at another setup step (another plan or a call this rank skipped)";
      continue;
    }
    std::memcpy(&theirs, all[r].data(), sizeof(theirs));
    if (!sameCall(theirs, record)) differing += "; rank " + std::to_string(r) + " runs " + describe(theirs);
    if (buffers) everyRank.push_back(theirs.buffers);
  }
  if (!differing.empty()) {
    throw Error(ErrorCategory::kInvalidArgument,
                "plan '" + plan.name + "', rank " + std::to_string(communicator.rank()) +
                    ": the ranks disagree on the call: this rank runs " + describe(record) + differing +
                    " (every rank must make the same collective call with the same size, dtype and op)");
  }
  return everyRank;
}

}  // namespace loom
