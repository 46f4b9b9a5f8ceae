#include "op_spec.hpp"

#include <array>
#include <string>

namespace loom {
namespace {

constexpr RefField kNone{};
constexpr RefField local{RefKind::kLocal, true};
constexpr RefField optionalLocal{RefKind::kLocal, false};
constexpr RefField remote{RefKind::kRemote, true};
constexpr RefField optionalRemote{RefKind::kRemote, false};
constexpr RefField any{RefKind::kAny, true};
constexpr RefField localScratch{RefKind::kLocalScratch, true};
constexpr RefField optionalLocalScratch{RefKind::kLocalScratch, false};
constexpr RefField remoteScratch{RefKind::kRemoteScratch, true};
constexpr uint8_t kWire = kMemoryBit | kPortBit;

// Order follows OpType so that opSpec() is an index. The sends (put, put_packet, read_put_packet) take
// one source for all destinations (src) or one per destination, paired in order (srcs).
constexpr std::array<OpSpec, kOpTypeCount> kSpecs{{
    {OpType::kCopy, "copy", local, local, kNone, kNone, kNone},
    {OpType::kPut, "put", optionalLocal, kNone, kNone, optionalLocal, remote, false, false, false, false, 0, kWire},
    {OpType::kGet, "get", remote, local, kNone, kNone, kNone, false, false, false, false, kMemoryBit, 0},
    {OpType::kReduce, "reduce", kNone, local, kNone, local, kNone, true},
    {OpType::kReadReduce, "read_reduce", kNone, local, kNone, any, kNone, true, false, false, false, kMemoryBit, 0},
    {OpType::kReduceSend, "reduce_send", kNone, optionalLocal, kNone, local, remote, true, false, false, false, 0,
     kWire},
    {OpType::kReadReduceSend, "read_reduce_send", kNone, optionalLocal, kNone, any, remote, true, false, false, false,
     kMemoryBit, kWire},
    {OpType::kSignal, "signal", kNone, kNone, kNone, kNone, kNone, false, true, true, false, 0, kWire},
    {OpType::kWait, "wait", kNone, kNone, kNone, kNone, kNone, false, true, true, false, 0, kWire},
    {OpType::kFlush, "flush", kNone, kNone, kNone, kNone, kNone, false, true, false, false, 0, kPortBit},
    {OpType::kBarrier, "barrier", kNone, kNone, kNone, kNone, kNone},
    {OpType::kSemAcquire, "sem_acquire", kNone, kNone, kNone, kNone, kNone},
    {OpType::kSemRelease, "sem_release", kNone, kNone, kNone, kNone, kNone},
    {OpType::kNop, "nop", kNone, kNone, kNone, kNone, kNone},
    {OpType::kPutPacket, "put_packet", optionalLocal, kNone, kNone, optionalLocal, remoteScratch, false, false, false,
     true, 0, kWire},
    {OpType::kReadPutPacket, "read_put_packet", optionalLocalScratch, kNone, kNone, optionalLocalScratch, remoteScratch,
     false, false, false, true, 0, kWire},
    {OpType::kCopyPacket, "copy_packet", local, localScratch, kNone, kNone, kNone, false, false, false, true},
    {OpType::kUnpackPacket, "unpack_packet", localScratch, local, kNone, kNone, kNone, false, false, false, true},
    {OpType::kReducePacket, "reduce_packet", local, local, kNone, localScratch, kNone, true, false, false, true},
    {OpType::kReduceSendPacket, "reduce_send_packet", local, local, kNone, localScratch, remoteScratch, true, false,
     false, true, 0, kWire},
    {OpType::kReduceCopyPacket, "reduce_copy_packet", local, local, localScratch, localScratch, kNone, true, false,
     false, true},
    {OpType::kReduceCopySendPacket, "reduce_copy_send_packet", local, local, localScratch, localScratch, remoteScratch,
     true, false, false, true, 0, kWire},
    // dst, dsts or both: with dsts, the fused reduce + broadcast (MSCCL++'s glres).
    {OpType::kMultimemReduce, "multimem_reduce", remote, optionalLocal, kNone, kNone, optionalRemote, true, false,
     false, false, kSwitchBit, kSwitchBit},
    {OpType::kMultimemBroadcast, "multimem_broadcast", local, kNone, kNone, kNone, remote, false, false, false, false,
     0, kSwitchBit},
    {OpType::kPipeline, "pipeline", kNone, kNone, kNone, kNone, kNone},
    {OpType::kPutWithSignal, "put_with_signal", local, kNone, kNone, kNone, remote, false, false, false, false, 0,
     kPortBit},
    {OpType::kPutWithSignalAndFlush, "put_with_signal_and_flush", local, kNone, kNone, kNone, remote, false, false,
     false, false, 0, kPortBit},
}};

constexpr bool specsInOrder() {
  for (size_t i = 0; i < kSpecs.size(); ++i) {
    if (static_cast<size_t>(kSpecs[i].type) != i) return false;
  }
  return true;
}
static_assert(specsInOrder(), "kSpecs must list ops in OpType order");

}  // namespace

const OpSpec& opSpec(OpType type) { return kSpecs[static_cast<size_t>(type)]; }

std::optional<OpType> opTypeFromName(std::string_view name) {
  for (const OpSpec& spec : kSpecs) {
    if (spec.name.size() == name.size() && spec.name[0] == name[0] && spec.name == name) return spec.type;
  }
  return std::nullopt;
}

std::string_view opTypeName(OpType value) { return opSpec(value).name; }

std::string channelMaskText(uint8_t mask) {
  std::string text;
  for (ChannelType type : {ChannelType::kMemory, ChannelType::kPort, ChannelType::kSwitch}) {
    if (!(mask & channelBit(type))) continue;
    if (!text.empty()) text += " or ";
    text += channelTypeName(type);
  }
  return "a " + text + " channel";
}

}  // namespace loom
