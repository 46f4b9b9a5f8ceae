#include "loom/executor.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>

#include "backend.hpp"
#include "buffer_layout.hpp"
#include "call_agreement.hpp"
#include "call_context.hpp"
#include "counted_scratch.hpp"
#include "gpu.hpp"
#include "gpu_sharing.hpp"
#include "loom/device/pair_calls.hpp"
#include "loom/error.hpp"
#include "loom/plan_registry.hpp"
#include "loom/proxy_service.hpp"
#include "loom/rank_list.hpp"
#include "op_context.hpp"
#include "op_spec.hpp"
#include "packet_writer.hpp"
#include "plan_cache.hpp"
#include "plan_resources.hpp"
#include "shared_proxy.hpp"
#include "symmetric_windows.hpp"
#include "user_buffer_staging.hpp"

namespace loom {
namespace {

Error invalid(const std::string& message) { return Error(ErrorCategory::kInvalidArgument, message); }

void collectReduceOps(const std::vector<Op>& ops, std::set<ReduceOp>& found) {
  for (const Op& op : ops) {
    if (op.reduceOp) found.insert(*op.reduceOp);
    collectReduceOps(op.body, found);
  }
}

// Whether any rank reaches a peer's input or output (not only scratch) or has a port channel's proxy copy out
// of its own buffers (a put, or a reduction it sends): then a context holds the user's buffers and is keyed by
// them, and new buffers are a setup step every rank must take at the same call. Packets over a port channel do
// not: they are packed into the channel's staging area and land in the peer's scratch, so a small all-reduce
// across hosts meets its peers only through its packets, not in a per-call exchange of buffers besides.
bool bindsUserBuffers(const Plan& plan) {
  for (const GpuProgram& gpu : plan.gpus) {
    std::set<int> ports;
    for (const Channel& channel : gpu.channels) {
      if (channel.type == ChannelType::kPort) ports.insert(int(channel.id));
    }
    std::function<bool(const std::vector<Op>&)> reaches = [&](const std::vector<Op>& ops) {
      for (const Op& op : ops) {
        std::vector<ChunkRef> refs = op.srcs;
        refs.insert(refs.end(), op.dsts.begin(), op.dsts.end());
        for (const auto& ref : {op.src, op.dst, op.packetDst}) {
          if (ref) refs.push_back(*ref);
        }
        for (const ChunkRef& ref : refs) {
          if (ref.isRemote() && ref.buffer != BufferType::kScratch) return true;
          if (ref.isRemote() && ports.count(int(ref.channel)) != 0 && !opSpec(op.type).packet) return true;
        }
        if (reaches(op.body)) return true;
      }
      return false;
    };
    for (const ThreadBlock& tb : gpu.threadblocks) {
      if (reaches(tb.ops)) return true;
    }
  }
  return false;
}

}  // namespace

// A call's buffers and their bytes.
struct CallBuffers {
  const void* input = nullptr;
  void* output = nullptr;
  uint64_t inputBytes = 0;
  uint64_t outputBytes = 0;
};

// The checked arguments of a counted call: its table and its buffers (a stand-in for an empty one).
struct CountedArguments {
  device::CallTable table{};
  CallBuffers buffers;
};

// How long a rank whose call failed spends telling its peers (Bootstrap::announceFailure).
constexpr int64_t kAnnounceWaitMs = 300;

struct Executor::Impl {
  std::shared_ptr<Communicator> communicator;
  std::unique_ptr<Backend> backend;
  std::shared_ptr<SharedProxy> proxy;  // this rank's, or its parent's on the same GPU (shared_proxy.hpp)
  std::vector<int> gpuSharers;         // ranks on this rank's GPU, this one included (several: gpu_sharing.hpp)
  std::mutex placementMutex;
  std::optional<Placement> placement;  // made by the first placement() call
  std::timed_mutex mutex;              // one call at a time: setup steps must happen in the same order on every rank
  std::unique_ptr<UserBufferStaging> staging;  // the multi-process CPU backend's copies of user buffers
  // Why an earlier call failed (a peer that timed out or went away), or empty; under its own lock, since
  // asyncError() reads it while a call in flight holds `mutex`.
  std::string failure;
  mutable std::mutex failureMutex;
  // Where the last call's program ran: a packet read's record holds an address in its scratch.
  // Guarded by failureMutex (asyncError reads it from a watchdog thread).
  struct LastLaunch {
    std::shared_ptr<const Plan> plan;
    uint64_t scratch = 0;
    uint64_t scratchBytes = 0;
    uint64_t messageBytes = 0;
  } lastLaunch;
  std::atomic<bool> aborted{false};
  std::list<uint64_t> planOrder;
  std::unordered_map<uint64_t, std::pair<CachedPlan, std::list<uint64_t>::iterator>> plans;
  uint64_t serial = 0;
  ExecutorStats stats;
  std::unique_ptr<HostBoard> board;  // callBoard()
  bool boardDecided = false;
  bool warnedDefaultStream = false;           // said once per executor (warnOnDefaultStream)
  std::shared_ptr<void> standInMemory;        // standIn()
  std::unique_ptr<SymmetricWindows> windows;  // registered by registerWindow

  // Where a counted call's empty buffer points (every buffer is registered, and a registration has bytes):
  // a few bytes of this rank's memory that no entry reaches.
  std::pair<void*, uint64_t> standIn() {
    constexpr uint64_t kBytes = 16;
    if (!standInMemory) standInMemory = backend->allocatePeerVisible(kBytes);
    return {standInMemory.get(), kBytes};
  }

  ProxyService& proxyService() { return proxy->get(communicator); }

  // Before memory a launched program may use is freed or replaced, every rank's earlier calls must
  // be over: peers write into this rank's scratch and this rank into theirs. `release` frees it then.
  // Ranks sharing a GPU free before any of them launches again: cudaFree waits for the whole device,
  // and a kernel launched meanwhile would wait for this rank's next call, which waits for the free.
  // `why` goes into the error of a failed synchronisation: it names the setup step the rank was in (with
  // ranks sharing a GPU, a device-wide wait is where a rank that quiesces alone deadlocks with its peers).
  void quiesce(void* stream, const char* why, const std::function<void()>& release = {}) {
    if (!backend->capturing(stream)) {
      try {
        backend->synchronize();
      } catch (const Error& error) {
        throw Error(error.category(), std::string(error.what()) + " (rank " + std::to_string(communicator->rank()) +
                                          ", waiting for every earlier call before " + why + ")");
      }
    }
    communicator->bootstrap().barrier();
    if (!release) return;
    release();
    if (gpuSharers.size() > 1) communicator->bootstrap().barrier();
  }

  CachedPlan& planFor(const Plan& plan, void* stream) {
    auto found = plans.find(plan.contentHash);
    if (found != plans.end()) {
      planOrder.splice(planOrder.begin(), planOrder, found->second.second);
      return found->second.first;
    }
    if (plans.size() >= kMaxPlans) {
      const auto evictable = std::find_if(planOrder.rbegin(), planOrder.rend(),
                                          [this](uint64_t hash) { return !hasCaptured(plans.at(hash).first); });
      if (evictable != planOrder.rend()) {
        quiesce(stream, "a cached plan is dropped (the plan cache is full)", [&] {
          plans.erase(*evictable);
          planOrder.erase(std::next(evictable).base());
        });
      }
    }
    CachedPlan cached;
    cached.resources = std::make_unique<PlanResources>(
        plan, *communicator, *backend, [this]() -> ProxyService& { return proxyService(); }, ++serial);
    std::set<ReduceOp> ops;
    for (const ThreadBlock& tb : plan.gpu(uint32_t(communicator->rank())).threadblocks) collectReduceOps(tb.ops, ops);
    if (ops.size() > 1) {
      throw Error(ErrorCategory::kInvalidPlan, "plan '" + plan.name + "' mixes reduction operators; a call has one");
    }
    if (!ops.empty()) cached.reduceOp = *ops.begin();
    cached.bindsUserBuffers = loom::bindsUserBuffers(plan);
    cached.plan = std::make_shared<const Plan>(plan);
    cached.shiftable =
        !cached.resources->hasPortChannels() && cached.resources->peers().size() <= device::kMaxShiftedPeers;
    ++stats.plansBuilt;
    planOrder.push_front(plan.contentHash);
    auto [it, inserted] = plans.emplace(plan.contentHash, std::make_pair(std::move(cached), planOrder.begin()));
    return it->second.first;
  }

  // Where the per-call agreements of plans bound to user buffers go: a board in host memory when every
  // rank runs on this host (set up at the first such call, which every rank makes at the same point),
  // else the bootstrap (nullptr).
  HostBoard* callBoard() {
    if (!boardDecided) {
      boardDecided = true;
      if (communicator->nodeCount() == 1) board = makeCallBoard(*communicator, setupTag(++serial, 0));
    }
    return board.get();
  }

  // Contexts set up on user buffers that a rank has freed since: its peers still map the old memory,
  // and while they do, CUDA refuses to map a new allocation that the free handed out in the same place
  // (cudaErrorAlreadyMapped). Collective, at every setup of a context on user buffers (every rank sets
  // one up at the same calls): each rank names its allocations that cached contexts use and that are
  // gone, and every rank drops the contexts set up on any rank's gone allocation.
  void dropContextsOnFreedBuffers(void* stream) {
    const auto me = size_t(communicator->rank());
    std::vector<uint64_t> gone;
    bool anyOnUserBuffers = false;  // the same on every rank: every rank caches the same contexts
    for (auto& [hash, entry] : plans) {
      for (auto& [key, context] : entry.first.contexts) {
        const std::vector<RankBuffers>& setUp = context.first->setUpWith();
        if (setUp.size() <= me) continue;
        anyOnUserBuffers = true;
        const RankBuffers& mine = setUp[me];
        const std::pair<uint64_t, uint64_t> buffers[] = {{mine.input, mine.inputAllocation},
                                                         {mine.output, mine.outputAllocation}};
        for (const auto& [address, id] : buffers) {
          if (id != 0 && backend->allocationId(reinterpret_cast<const void*>(address)) != id) gone.push_back(id);
        }
      }
    }
    if (!anyOnUserBuffers) return;  // so no rank takes the exchange below
    std::sort(gone.begin(), gone.end());
    gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
    const auto everyRank = communicator->bootstrap().allGather(
        std::span(reinterpret_cast<const uint8_t*>(gone.data()), gone.size() * sizeof(uint64_t)));
    std::vector<std::set<uint64_t>> goneOf(everyRank.size());
    bool any = false;
    for (size_t rank = 0; rank < everyRank.size(); ++rank) {
      for (size_t at = 0; at + sizeof(uint64_t) <= everyRank[rank].size(); at += sizeof(uint64_t)) {
        uint64_t id = 0;
        std::memcpy(&id, everyRank[rank].data() + at, sizeof(id));
        goneOf[rank].insert(id);
        any = true;
      }
    }
    if (!any) return;
    const auto usesGone = [&](const CallContext& context) {
      const std::vector<RankBuffers>& setUp = context.setUpWith();
      for (size_t rank = 0; rank < setUp.size() && rank < goneOf.size(); ++rank) {
        if (goneOf[rank].count(setUp[rank].inputAllocation) || goneOf[rank].count(setUp[rank].outputAllocation)) {
          return true;
        }
      }
      return false;
    };
    quiesce(stream, "the contexts on freed user buffers are dropped", [&] {
      for (auto& [hash, entry] : plans) stats.freedBufferContextsDropped += dropContexts(entry.first, usesGone);
    });
  }

  // The symmetric windows that hold all of a call's input and output, when there are such.
  std::optional<std::pair<WindowPlace, WindowPlace>> windowsHolding(const CallBuffers& buffers) const {
    if (windows->empty()) return std::nullopt;
    const std::optional<WindowPlace> input = windows->find(buffers.input, buffers.inputBytes);
    const std::optional<WindowPlace> output = windows->find(buffers.output, buffers.outputBytes);
    if (!input || !output) return std::nullopt;
    return std::pair(*input, *output);
  }

  // Where rank `rank`'s `address` lies in window `id` (none: outside every window this rank knows).
  std::optional<uint64_t> offsetIn(uint64_t id, uint64_t address, size_t rank) const {
    const SymmetricWindow* window = id != 0 ? windows->byId(id) : nullptr;
    if (window == nullptr) return std::nullopt;
    return address - window->bases[rank];
  }

  // Every rank's buffers lie in the windows this rank's lie in (or, like this rank's, in none), at the same
  // offsets: else a rank would take a window's context that its peers never set up, or shift wrongly. Runs
  // on every exchanging call, so the text is made only for an error.
  void checkWindowsAgree(const Plan& plan, const std::vector<RankBuffers>& everyRank, const RankBuffers& mine) const {
    const auto me = size_t(communicator->rank());
    const auto agrees = [&](const RankBuffers& r, size_t rank) {
      if (r.inputWindow != mine.inputWindow || r.outputWindow != mine.outputWindow) return false;
      if (mine.inputWindow == 0 && mine.outputWindow == 0) return true;
      return offsetIn(r.inputWindow, r.input, rank) == offsetIn(mine.inputWindow, mine.input, me) &&
             offsetIn(r.outputWindow, r.output, rank) == offsetIn(mine.outputWindow, mine.output, me);
    };
    std::string differing;
    const auto where = [&](const RankBuffers& r, size_t rank) {
      if (r.inputWindow == 0 && r.outputWindow == 0) return std::string("in no symmetric window");
      const auto offset = [&](uint64_t id, uint64_t address) {
        const std::optional<uint64_t> at = offsetIn(id, address, rank);
        return at ? std::to_string(*at) : std::string("?");
      };
      return "in windows " + std::to_string(r.inputWindow) + " (input, offset " + offset(r.inputWindow, r.input) +
             ") and " + std::to_string(r.outputWindow) + " (output, offset " + offset(r.outputWindow, r.output) + ")";
    };
    for (size_t r = 0; r < everyRank.size(); ++r) {
      if (!agrees(everyRank[r], r)) differing += "; rank " + std::to_string(r) + "'s lie " + where(everyRank[r], r);
    }
    if (!differing.empty()) {
      throw invalid("plan '" + plan.name + "', rank " + std::to_string(me) + ": this rank's buffers lie " +
                    where(mine, me) + differing +
                    " (buffers in symmetric windows must lie in the same windows at the same offsets on every rank)");
    }
  }

  // The context of this call's shape and every rank's buffers, set up where there is none. A plan
  // bound to user buffers exchanges a few bytes per call for it: which buffers every rank passes (a
  // CUDA graph pays it at capture only). Plans that reach only peers' scratch depend on the size
  // alone (the launch sets the buffers) and check the call when they set up a context. `everyRank`:
  // the buffers the ranks passed (empty for those plans), from which the launch shifts peers' ones.
  CallContext& contextFor(CachedPlan& cached, const Plan& plan, const CallShape& shape, const CallBuffers& buffers,
                          void* stream, std::vector<RankBuffers>& everyRank) {
    const uint64_t messageBytes = shape.messageBytes;
    const void* input = buffers.input;
    void* output = buffers.output;
    ContextKey key{messageBytes, shape.type, shape.op, {}};
    // What this rank tells its peers of its buffers (an allocation id is a driver query on a GPU: asked only
    // for calls that exchange).
    const auto mineOf = [&] {
      return RankBuffers{reinterpret_cast<uint64_t>(input),
                         reinterpret_cast<uint64_t>(output),
                         backend->allocationId(input),
                         backend->allocationId(output),
                         buffers.inputBytes,
                         buffers.outputBytes};
    };
    // Buffers in symmetric windows: every rank's are known here, and the context is keyed by the pair of windows.
    std::optional<std::pair<WindowPlace, WindowPlace>> windowed;
    if (cached.bindsUserBuffers && cached.shiftable) windowed = windowsHolding(buffers);
    if (windowed) {
      everyRank = windowedBuffers(windowed->first, windowed->second);
      RankBuffers& windows = key.ranks.emplace_back();
      windows.inputWindow = windowed->first.window->id;
      windows.outputWindow = windowed->second.window->id;
      ++stats.windowCalls;
    } else if (cached.bindsUserBuffers) {
      const RankBuffers mine = mineOf();
      everyRank = agreeOnCall(*communicator, callBoard(), plan, shape, mine);
      ++stats.bufferExchanges;
      checkWindowsAgree(plan, everyRank, mine);
      key.ranks = everyRank;
      const bool allocationsKnown = std::all_of(everyRank.begin(), everyRank.end(), [](const RankBuffers& r) {
        return r.inputAllocation != 0 && r.outputAllocation != 0;
      });
      // One context per allocations: peers map each allocation whole, so buffers anywhere in them (of
      // any size, for counted calls) are reached by shifting.
      if (cached.shiftable && allocationsKnown) {
        for (RankBuffers& r : key.ranks) r.input = r.output = r.inputBytes = r.outputBytes = 0;
      }
    }
    auto found = cached.contexts.find(key);
    if (found != cached.contexts.end()) {
      cached.order.splice(cached.order.begin(), cached.order, found->second.second);
      return *found->second.first;
    }
    if (!cached.bindsUserBuffers) agreeOnCall(*communicator, nullptr, plan, shape, std::nullopt);
    // A window context is set up where the ranks meet anyway: they check the call and the offsets there.
    std::vector<RankBuffers> setUpWith = everyRank;
    if (windowed) {
      RankBuffers mine = mineOf();
      mine.inputWindow = windowed->first.window->id;
      mine.outputWindow = windowed->second.window->id;
      checkWindowsAgree(plan, agreeOnCall(*communicator, callBoard(), plan, shape, mine), mine);
      ++stats.bufferExchanges;
      // Set up on the windows' bases and whole bytes, so that every offset in them is a shift.
      setUpWith = windowedBuffers({windowed->first.window, 0}, {windowed->second.window, 0});
      input = reinterpret_cast<const void*>(setUpWith[size_t(communicator->rank())].input);
      output = reinterpret_cast<void*>(setUpWith[size_t(communicator->rank())].output);
    }
    if (cached.bindsUserBuffers) dropContextsOnFreedBuffers(stream);
    SetupScope setup;
    PlanResources& resources = *cached.resources;
    // Every rank grows its scratch at the same calls (to the largest any rank needs), so every rank
    // drops the contexts that refer to the old one at the same time. A counted plan's scratch holds its
    // mailboxes and, in "ll" plans, its packet regions (counted_scratch.hpp).
    const BufferLayout layout(resources.plan(), messageBytes);
    uint64_t scratchNeeded = 1;  // every rank registers and sends a scratch, used or not
    for (const GpuProgram& gpu : resources.plan().gpus) {
      scratchNeeded = std::max(scratchNeeded, layout.scratchBytes(gpu.scratchChunks));
    }
    if (plan.collective == Collective::kAllToAllV) {
      scratchNeeded = std::max(scratchNeeded, countedScratch(resources.plan()).bytes());
    }
    quiesce(stream, "a new call context is set up (scratch may grow)", [&] {
      if (resources.reserveScratch(scratchNeeded)) {
        // Every context refers to the old scratch (and the peers' old scratch): rebuild them all, but
        // those captured in graphs, which keep the old one.
        dropContexts(cached, [](const CallContext& context) { return !context.captured(); });
      }
      if (cached.contexts.size() >= kMaxContextsPerPlan) {
        dropContexts(
            cached, [](const CallContext& context) { return !context.captured(); }, 1);
      }
    });
    auto context = std::make_unique<CallContext>(resources, *communicator, *backend, messageBytes, input, output,
                                                 cached.bindsUserBuffers, setUpWith, ++serial);
    ++stats.contextsBuilt;
    stats.specializedTransfers += context->transfers().specialized;
    stats.genericTransfers += context->transfers().generic;
    stats.inlinedContexts += context->inlined() ? 1 : 0;
    cached.order.push_front(key);
    auto [it, inserted] = cached.contexts.emplace(key, std::make_pair(std::move(context), cached.order.begin()));
    return *it->second.first;
  }

  // A plan whose proxy calls CUDA while its kernel waits, launched on the legacy default stream (null, or
  // cudaStreamLegacy, 0x1): work the program queues there behind the kernel can hold the proxy's copies back
  // until the device timeout (2 x H200, docs/executor.md, limits). Said once, not refused: the cause is
  // inferred, and the calls usually go through.
  void warnOnDefaultStream(const PlanResources& resources, void* stream) {
    if (warnedDefaultStream || !backend->onGpu() || reinterpret_cast<uintptr_t>(stream) > 1 ||
        !resources.proxyCallsCuda()) {
      return;
    }
    warnedDefaultStream = true;
    std::fprintf(stderr,
                 "loom: warning: rank %d: plan '%s' has port channels over CUDA IPC, whose proxy copies with CUDA "
                 "calls while the kernel waits, and runs on the legacy default stream: work queued there behind "
                 "the kernel can hold those copies back until the device timeout; run it on a stream of your own "
                 "(docs/executor.md, limits)\n",
                 communicator->rank(), resources.plan().name.c_str());
  }

  // What a call launches once its plan, context and buffers are set up (prepare()).
  struct PreparedCall {
    device::Program program;
    const device::InlineProgram* inlined = nullptr;
    uint32_t threads = 0;
    bool staged = false;  // the multi-process CPU backend's copies of the user's buffers: copied back after
  };

  // One call up to its launch: the plan's resources, the staged buffers (multi-process CPU backend), the
  // context, the program with this call's buffers.
  PreparedCall prepare(const Plan& plan, const CallShape& shape, CallBuffers buffers, void* stream) {
    const ExecutorStats before = stats;
    CachedPlan& cached = planFor(plan, stream);
    warnOnDefaultStream(*cached.resources, stream);
    if (cached.reduceOp && *cached.reduceOp != shape.op) {
      throw invalid("op: plan '" + plan.name + "' reduces with '" + std::string(reduceOpName(*cached.reduceOp)) +
                    "', the call asks for '" + std::string(reduceOpName(shape.op)) +
                    "'; compile a plan for that operator");
    }
    PreparedCall prepared;
    prepared.staged = cached.bindsUserBuffers && backend->stagesUserBuffers();
    if (prepared.staged) {
      if (!staging) staging = std::make_unique<UserBufferStaging>(*backend);
      std::tie(buffers.input, buffers.output) =
          staging->stageIn(buffers.input, buffers.inputBytes, buffers.output, buffers.outputBytes);
    }
    std::vector<RankBuffers> everyRank;
    CallContext& context = contextFor(cached, plan, shape, buffers, stream, everyRank);
    // Once captured, always kept: an eager call need not ask again.
    if (!context.captured() && backend->capturing(stream)) context.markCaptured();
    if (gpuSharers.size() > 1 &&
        (stats.plansBuilt != before.plansBuilt || stats.contextsBuilt != before.contextsBuilt)) {
      // Ranks sharing a GPU: no rank launches until every rank's setup allocations are done. CUDA may
      // order a kernel after an allocation behind every kernel already running, and a peer's kernel
      // already running waits for this rank's.
      communicator->bootstrap().barrier();
    }
    prepared.program = context.program();
    {
      std::lock_guard lock(failureMutex);
      lastLaunch = {cached.plan, uintptr_t(prepared.program.buffers[2]), context.scratchBytes(), shape.messageBytes};
    }
    prepared.program.buffers[0] = const_cast<void*>(buffers.input);
    prepared.program.buffers[1] = buffers.output;
    context.shiftPeers(prepared.program, everyRank);
    prepared.inlined = context.inlineProgram(prepared.program);
    prepared.threads = context.threads();
    return prepared;
  }

  // Turns a launch's failure other than a loom::Error into the error that explains it: an abort, or a
  // host-thread wait that timed out or a bad entry of a counted call (CPU backend), which left its record
  // (who waited for what). Either way the ranks are out of step from here on. Rethrows the failure otherwise.
  [[noreturn]] void explainLaunchFailure() {
    try {
      throw;
    } catch (const Error&) {
      throw;
    } catch (const std::exception&) {
      if (aborted) throw invalid("rank " + std::to_string(communicator->rank()) + ": the call was aborted");
      DeviceDiagnostics& diagnostics = communicator->deviceDiagnostics();
      try {
        diagnostics.check();
      } catch (const Error& error) {
        noteFailure(error.what());
        throw;
      }
      // Host-thread waits that a peer's announced failure ended leave no record: the peer's words say why.
      if (std::optional<std::string> peer = diagnostics.peerFailure()) {
        const std::string text = "rank " + std::to_string(communicator->rank()) + ": the call ended: " + *peer;
        noteFailure(text);
        throw Error(ErrorCategory::kTransport, text);
      }
      throw;
    }
  }

  // One call once its arguments are checked: prepare(), the launch (with `table` for a counted call).
  void run(const Plan& plan, const CallShape& shape, const CallBuffers& buffers, void* stream,
           const device::CallTable* table = nullptr) {
    PreparedCall prepared = prepare(plan, shape, buffers, stream);
    try {
      if (table != nullptr) {
        backend->launchCounted(prepared.program, *table, prepared.threads, stream);
      } else {
        backend->launch(prepared.program, prepared.inlined, prepared.threads, shape.type, shape.op, stream);
      }
    } catch (...) {
      explainLaunchFailure();
    }
    if (prepared.staged) staging->stageOut();
  }

  // After a peer timed out or went away (the ranks no longer agree on where they are) every later call
  // refuses: notes a timeout's or a transport failure's error, naming the peers that are gone too.
  // With `plan`, the error first names the plan op the device record says stopped (withOpContext), so that
  // the peers hear that too.
  [[noreturn]] void recordFailure(const Plan* plan = nullptr) {
    try {
      throw;
    } catch (const Error& caught) {
      const Error error = plan != nullptr ? withOpContext(*plan, caught) : caught;
      const bool named = std::string_view(error.what()) != caught.what();
      // This rank's own wait or entry check stopped the call: its peers wait for it in vain, so they hear
      // it now, naming this rank and why, rather than at their timeouts.
      const bool faultedHere = communicator->deviceDiagnostics().faultedHere();
      if (faultedHere) communicator->bootstrap().announceFailure(error, kAnnounceWaitMs);
      if (faultedHere || error.category() == ErrorCategory::kTimeout ||
          error.category() == ErrorCategory::kTransport) {
        noteFailure(error.what());
        // A wait names the peer it waited on; a peer that died may be another one: name it too.
        const std::string departed = departedPeers();
        if (!departed.empty()) throw Error(error.category(), std::string(error.what()) + departed);
      }
      if (named) throw error;
      throw;
    }
  }

  // The error a failed launch of this rank's call becomes: explainLaunchFailure(), then recordFailure().
  std::exception_ptr failureOfLaunch(const std::exception_ptr& failure) {
    try {
      try {
        std::rethrow_exception(failure);
      } catch (...) {
        explainLaunchFailure();
      }
    } catch (...) {
      try {
        recordFailure();
      } catch (...) {
        return std::current_exception();
      }
    }
    return failure;  // not reached: both throw
  }

  CountedArguments countedArguments(const Plan& plan, const CountedCall& call, void* stream);

  // run(), recording a failure (recordFailure).
  void runRecordingFailure(const Plan& plan, const CallShape& shape, const CallBuffers& buffers, void* stream,
                           const device::CallTable* table = nullptr) {
    try {
      run(plan, shape, buffers, stream, table);
    } catch (...) {
      recordFailure(&plan);
    }
    ++stats.launches;
  }

  // `error`, naming the plan op that this rank's device record says stopped (its DSL line, the peers it
  // waits on), where the error is that record's report; for a packet read, the peer whose packet it was.
  Error withOpContext(const Plan& plan, const Error& error) const {
    const std::optional<device::DiagnosticRecord> record = communicator->deviceDiagnostics().recorded();
    if (!record || record->rank != communicator->rank()) return error;
    std::string context = opContext(plan, uint32_t(record->rank), record->block, record->op);
    if (context.empty() || std::string_view(error.what()).find(context) != std::string_view::npos) return error;
    const int32_t waited = device::endsCleanly(record->kind) ? record->waited : record->kind;
    LastLaunch launch;
    {
      std::lock_guard lock(failureMutex);
      launch = lastLaunch;
    }
    if (waited == int32_t(device::WaitKind::kPacket) && launch.plan && launch.plan->contentHash == plan.contentHash &&
        record->address != 0) {
      const uint64_t offset = record->address - launch.scratch;
      if (record->address >= launch.scratch && offset < launch.scratchBytes) {
        context += packetWriterText(plan, packetWriter(plan, uint32_t(record->rank), launch.messageBytes, offset));
      }
    }
    return Error(error.category(), std::string(error.what()) + context);
  }

  void noteFailure(const std::string& text) {
    std::lock_guard lock(failureMutex);
    failure = text;
  }
  std::string failureText() const {
    std::lock_guard lock(failureMutex);
    return failure;
  }

  // Which peers are gone, and how: a rank whose bootstrap said goodbye left on purpose (it destroyed or
  // aborted its communicator, or its process ended normally); one without a goodbye exited or was killed.
  std::string departedPeers() {
    std::vector<int> departed, lost, aborted;
    std::map<int, std::string> links;
    try {
      departed = communicator->bootstrap().departedPeers();
      lost = communicator->bootstrap().lostPeers();
      aborted = communicator->bootstrap().abortedPeers();
      links = communicator->bootstrap().lostLinks();
    } catch (const std::exception&) {
      return "";
    }
    std::vector<int> gone;  // lost without a lost link: the process
    for (int rank : lost) {
      if (!links.contains(rank)) gone.push_back(rank);
    }
    const auto among = [](const std::vector<int>& ranks, int rank) {
      return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
    };
    std::vector<int> left;
    for (int rank : departed) {
      if (!among(lost, rank) && !among(aborted, rank)) left.push_back(rank);
    }
    std::string text;
    if (!aborted.empty()) text += "; " + rankList(aborted) + " announced an abort of the communicator";
    if (!left.empty()) {
      text += "; " + rankList(left) +
              " closed the bootstrap connection to this rank after a goodbye (it left on purpose: it destroyed or "
              "aborted its communicator, or its process ended)";
    }
    for (const auto& [rank, link] : links) text += "; " + link;
    if (!gone.empty()) {
      text += "; " + rankList(gone) +
              " closed the bootstrap connection to this rank without a goodbye (its process exited or was killed)";
    }
    return text;
  }

  void checkUsable() {
    const std::string where = "executor of rank " + std::to_string(communicator->rank());
    if (aborted) throw invalid(where + ": the communicator was aborted; create a new one");
    if (const std::string failed = failureText(); !failed.empty()) {
      throw invalid(where + ": an earlier call failed (" + failed +
                    "); the communicator must be aborted (Communicator.abort()) and created anew");
    }
    if (std::optional<std::string> stopped = cleanDeviceStop()) {
      noteFailure(*stopped);
      throw Error(ErrorCategory::kTransport,
                  *stopped + "; the communicator must be aborted (Communicator.abort()) and created anew");
    }
  }

  // A GPU kernel whose wait ended on a departed peer or an abort returned without an error, leaving
  // only its record (a trap's record is explained where the CUDA error surfaces).
  std::optional<std::string> cleanDeviceStop() const {
    if (!backend->onGpu()) return std::nullopt;
    std::optional<std::string> report = communicator->deviceDiagnostics().report();
    if (!report || !communicator->deviceDiagnostics().endedCleanly()) return std::nullopt;
    return report;
  }

  // Frees what the plans hold (channels, scratch, contexts, staging) and stops the proxy.
  void release() {
    try {
      // Kernels in flight still use the programs, semaphores and scratch about to be freed.
      backend->synchronize();
    } catch (...) {
    }
    // What the programs queued for the proxy is carried out before the memory it names is freed
    // (the last signal of a call may still be queued when its kernel ends); an abort drops it. A proxy
    // that other executors still use (a split's, or its parent's) keeps running: this one's triggers
    // are carried out, and the plans hand their ids back below (with a warning if they never drain).
    if (ProxyService* service = proxy->made()) {
      if (proxy.use_count() == 1) {
        service->stop(!aborted);
      } else {
        service->drain();
      }
    }
    plans.clear();
    planOrder.clear();
    staging.reset();
    standInMemory.reset();
    board.reset();  // its shared host memory too (the executor makes no call after this)
  }
};

namespace {

bool overlap(const void* a, uint64_t aBytes, const void* b, uint64_t bBytes) {
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  return x < y + bBytes && y < x + aBytes;
}

// In place, input and output are one buffer: where the plan expects the input inside the output.
void checkBuffers(const Plan& plan, uint32_t rank, const BufferLayout& layout, const void* input, const void* output) {
  if (input == nullptr)
    throw invalid("input: null pointer for a message of " + std::to_string(layout.inputBytes()) + " bytes");
  if (output == nullptr) throw invalid("output: null pointer");
  const auto* in = static_cast<const uint8_t*>(input);
  const auto* out = static_cast<const uint8_t*>(output);
  // A reduce writes the root's output only: a non-root rank may pass any output, its input included
  // (NCCL's ncclReduce ignores recvbuff there), whether the plan runs in place or not.
  if (plan.collective == Collective::kReduce && plan.root && rank != *plan.root) return;
  if (!plan.inplace) {
    if (overlap(in, layout.inputBytes(), out, layout.outputBytes())) {
      throw invalid("output: overlaps the input, but plan '" + plan.name +
                    "' is out of place (compile it with inplace=True for one buffer)");
    }
    return;
  }
  const uint8_t* expected = out;
  std::string where = "the output";
  if (plan.collective == Collective::kAllGather) {
    expected = out + uint64_t(rank) * layout.inputBytes();
    where = "rank " + std::to_string(rank) + "'s slot of the output (output + rank x message bytes)";
  } else if (plan.collective == Collective::kReduceScatter) {
    expected = out - uint64_t(rank) * layout.outputBytes();
    where =
        "the output minus rank x output bytes (the output is rank " + std::to_string(rank) + "'s piece of the input)";
  }
  if (in != expected) {
    throw invalid("input: plan '" + plan.name + "' runs in place, so the input must be " + where);
  }
}

void checkWorldSize(const Plan& plan, const Communicator& comm) {
  if (plan.worldSize != uint32_t(comm.worldSize())) {
    throw invalid("plan: '" + plan.name + "' is for " + std::to_string(plan.worldSize) +
                  " ranks, the communicator has " + std::to_string(comm.worldSize()));
  }
}

// A counted call's entries against its buffers and plan, on the host (the device checks entries it
// reads from memory itself).
void checkEntries(const Plan& plan, const CountedCall& call, uint32_t rank) {
  const size_t n = plan.worldSize;
  uint64_t largest = 0;
  const auto check = [&](const std::vector<MessageEntry>& entries, const char* name, uint64_t limit,
                         const char* buffer) {
    if (entries.size() != n) {
      throw invalid(std::string(name) + ": expected one entry per rank (" + std::to_string(n) + "), got " +
                    std::to_string(entries.size()));
    }
    for (size_t p = 0; p < n; ++p) {
      const MessageEntry& e = entries[p];
      if (e.offset > limit || e.bytes > limit - e.offset) {
        throw invalid(std::string(name) + "[" + std::to_string(p) + "]: bytes " + std::to_string(e.offset) + " to " +
                      std::to_string(e.offset + e.bytes) + " run past the end of the " + std::to_string(limit) +
                      "-byte " + buffer);
      }
      largest = std::max(largest, e.bytes);
    }
  };
  check(call.sends, "sends", call.inputBytes, "input");
  check(call.receives, "receives", call.outputBytes, "output");
  if (call.sends[rank].bytes != call.receives[rank].bytes) {
    throw invalid("receives[" + std::to_string(rank) + "]: this rank sends itself " +
                  std::to_string(call.sends[rank].bytes) + " bytes but receives " +
                  std::to_string(call.receives[rank].bytes) + " from itself");
  }
  if (largest > plan.maxMessageBytes) {
    throw invalid("sends, receives: an entry of " + std::to_string(largest) + " bytes is above the largest plan '" +
                  plan.name + "' takes (" + std::to_string(plan.maxMessageBytes) + ")");
  }
}

}  // namespace

uint64_t planOutputBytes(const Plan& plan, uint64_t messageBytes) {
  if (plan.collective == Collective::kAllGather) return messageBytes * plan.worldSize;
  if (plan.collective == Collective::kReduceScatter) return messageBytes / plan.worldSize;
  return messageBytes;
}

// The machine a tuned table must have been measured on to serve this communicator (tuned_table.hpp).
static TunedMachine tunedMachineOf(const Communicator& comm) {
  TunedMachine machine;
  const bool onGpu = comm.cudaDevice() != Communicator::kHostOnly;
  machine.backend = onGpu ? "gpu" : "cpu";
  machine.gpu = onGpu ? gpu::deviceName(comm.cudaDevice()) : std::string();
  machine.gpus = onGpu ? uint32_t(gpu::deviceCount()) : 0;
  machine.worldSize = uint32_t(comm.worldSize());
  machine.ranksPerNode = uint32_t(comm.localWorldSize());
  return machine;
}

Executor::Executor(std::shared_ptr<Communicator> communicator, const Executor* shareProxyOf)
    : impl_(std::make_unique<Impl>()) {
  if (!communicator) throw invalid("communicator: null");
  impl_->communicator = std::move(communicator);
  Communicator& comm = *impl_->communicator;
  if (shareProxyOf != nullptr && shareProxyOf->impl_->proxy->device() == comm.cudaDevice()) {
    impl_->proxy = shareProxyOf->impl_->proxy;
  } else {
    impl_->proxy = std::make_shared<SharedProxy>(comm.cudaDevice());
  }
  impl_->gpuSharers = checkGpuSharing(comm);
  impl_->windows = std::make_unique<SymmetricWindows>(comm.rank());
  impl_->backend = comm.cudaDevice() == Communicator::kHostOnly ? makeCpuBackend(comm) : makeGpuBackend(comm);
  // The bundled plans become selectable with the first executor of the process (per cache root), and this
  // machine's tuned table, if `loom tune` wrote one, before them.
  PlanRegistry::global().ensureDefaultPlansLoaded();
  PlanRegistry::global().ensureTunedTableLoaded(tunedMachineOf(comm));
}

Executor::~Executor() {
  if (!impl_) return;
  try {
    // Kernels in flight still use the programs, semaphores and scratch about to be freed.
    impl_->backend->synchronize();
  } catch (...) {
  }
  impl_->release();
}

void Executor::copyLocal(const void* input, void* output, uint64_t bytes, void* stream) {
  if (bytes == 0 || input == output) return;
  if (input == nullptr) throw invalid("input: null pointer for a message of " + std::to_string(bytes) + " bytes");
  if (output == nullptr) throw invalid("output: null pointer");
  std::lock_guard lock(impl_->mutex);
  impl_->checkUsable();
  impl_->backend->copy(output, input, bytes, stream);
}

void Executor::scale(void* data, uint64_t bytes, DataType type, float factor, void* stream) {
  if (bytes == 0) return;
  if (data == nullptr) throw invalid("data: null pointer for " + std::to_string(bytes) + " bytes");
  const uint64_t elementBytes = dataTypeBytes(type);
  if (bytes % elementBytes != 0) {
    throw invalid("bytes: " + std::to_string(bytes) + " is not a whole number of " + std::string(dataTypeName(type)) +
                  " elements");
  }
  std::lock_guard lock(impl_->mutex);
  impl_->checkUsable();
  impl_->backend->scale(data, bytes / elementBytes, type, factor, stream);
}

Communicator& Executor::communicator() const { return *impl_->communicator; }
bool Executor::onGpu() const { return impl_->backend->onGpu(); }
bool Executor::capturing(void* stream) const { return impl_->backend->capturing(stream); }

TunedMachine Executor::tunedMachine() const { return tunedMachineOf(*impl_->communicator); }

Placement Executor::placement() const {
  std::lock_guard lock(impl_->placementMutex);
  if (impl_->placement) return *impl_->placement;
  const Communicator& comm = *impl_->communicator;
  Placement placement;
  placement.residentBlocks = impl_->backend->maxResidentBlocks(1024, DataType::kFloat32, ReduceOp::kSum);
  if (impl_->backend->onGpu()) {
    placement.ranksSharingGpu = uint32_t(std::max<size_t>(impl_->gpuSharers.size(), 1));
  } else {
    placement.ranksSharingGpu = 0;
    for (int r = 0; r < comm.worldSize(); ++r) placement.ranksSharingGpu += comm.sameProcess(r) && comm.sameNode(r);
  }
  impl_->placement = placement;
  return placement;
}
ExecutorStats Executor::stats() const {
  std::lock_guard lock(impl_->mutex);
  ExecutorStats stats = impl_->stats;
  const ProxyService* proxy = impl_->proxy->made();
  stats.proxyMemories = proxy ? proxy->memoriesHeld() : 0;
  stats.proxySharers = uint64_t(impl_->proxy.use_count());
  return stats;
}

void Executor::execute(const Plan& plan, const void* input, void* output, uint64_t messageBytes, DataType type,
                       ReduceOp op, void* stream) {
  std::lock_guard lock(impl_->mutex);
  impl_->checkUsable();
  Communicator& comm = *impl_->communicator;
  const uint32_t rank = uint32_t(comm.rank());
  if (plan.collective == Collective::kAllToAllV) {
    throw invalid("plan: '" + plan.name +
                  "' is an alltoallv plan, whose sizes come with each call: run it with executeCounted (Python: "
                  "Executor.execute_counted, Communicator.all_to_all with splits)");
  }
  checkWorldSize(plan, comm);
  if (messageBytes < plan.minMessageBytes || messageBytes > plan.maxMessageBytes) {
    throw invalid("message bytes: " + std::to_string(messageBytes) + " is outside the range of plan '" + plan.name +
                  "' (" + std::to_string(plan.minMessageBytes) + " to " + std::to_string(plan.maxMessageBytes) + ")");
  }
  const uint32_t elementBytes = dataTypeBytes(type);
  if (messageBytes % elementBytes != 0) {
    throw invalid("message bytes: " + std::to_string(messageBytes) + " is not a whole number of " +
                  std::string(dataTypeName(type)) + " elements (" + std::to_string(elementBytes) + " bytes each)");
  }
  const BufferLayout layout(plan, messageBytes);
  const bool splitsIntoPieces =
      plan.collective == Collective::kReduceScatter || plan.collective == Collective::kAllToAll;
  if (layout.outputBytes() % elementBytes != 0 ||
      (splitsIntoPieces && (messageBytes / plan.worldSize) % elementBytes != 0)) {
    throw invalid("message bytes: " + std::to_string(messageBytes) + " does not split into " +
                  std::to_string(plan.worldSize) + " whole pieces of " + std::string(dataTypeName(type)) + " elements");
  }
  if (messageBytes == 0) return;
  checkBuffers(plan, rank, layout, input, output);
  if (impl_->gpuSharers.size() > 1 && stream == nullptr) {
    throw invalid(
        "stream: ranks sharing one GPU each need a stream of their own; on the legacy default stream "
        "their kernels run one after another and wait for each other forever");
  }
  if (impl_->backend->onGpu() && !impl_->gpuSharers.empty()) {
    checkResidency(plan, impl_->gpuSharers, impl_->backend->maxResidentBlocks(plan.threadsPerBlock, type, op), comm);
  }
  impl_->runRecordingFailure(plan, {plan.contentHash, messageBytes, type, op},
                             {input, output, layout.inputBytes(), layout.outputBytes()}, stream);
}

// Checks a counted call's arguments (naming the bad one) and makes its table.
CountedArguments Executor::Impl::countedArguments(const Plan& plan, const CountedCall& call, void* stream) {
  static_assert(sizeof(MessageEntry) == sizeof(device::CallEntry), "a MessageEntry is read as a device CallEntry");
  Communicator& comm = *communicator;
  const auto rank = uint32_t(comm.rank());
  if (plan.collective != Collective::kAllToAllV) {
    throw invalid("plan: '" + plan.name + "' is a " + std::string(collectiveName(plan.collective)) +
                  " plan; executeCounted runs alltoallv plans, whose sizes come with the call");
  }
  checkWorldSize(plan, comm);
  CountedArguments arguments;
  device::CallTable& table = arguments.table;
  table.inputBytes = call.inputBytes;
  table.outputBytes = call.outputBytes;
  table.peers = plan.worldSize;
  table.alignment = uint32_t(std::max<uint64_t>(plan.alignmentBytes, kMinChunkAlignment));
  if (call.deviceEntries != nullptr) {
    if (!call.sends.empty() || !call.receives.empty()) {
      throw invalid("deviceEntries: give the entries either in device memory or as sends and receives, not both");
    }
    table.entries = reinterpret_cast<const device::CallEntry*>(call.deviceEntries);
  } else {
    if (2 * plan.worldSize > device::kMaxHeldEntries) {
      throw invalid("sends, receives: a call of " + std::to_string(plan.worldSize) +
                    " ranks passes its entries in device memory (deviceEntries); the launch carries at most " +
                    std::to_string(device::kMaxHeldEntries / 2) + " ranks' entries");
    }
    checkEntries(plan, call, rank);
    for (uint32_t p = 0; p < plan.worldSize; ++p) {
      table.held[p] = {call.sends[p].offset, call.sends[p].bytes};
      table.held[plan.worldSize + p] = {call.receives[p].offset, call.receives[p].bytes};
    }
  }
  if (call.input == nullptr && call.inputBytes > 0) {
    throw invalid("input: null pointer for a buffer of " + std::to_string(call.inputBytes) + " bytes");
  }
  if (call.output == nullptr && call.outputBytes > 0) {
    throw invalid("output: null pointer for a buffer of " + std::to_string(call.outputBytes) + " bytes");
  }
  if (overlap(call.input, call.inputBytes, call.output, call.outputBytes)) {
    throw invalid("output: overlaps the input, but alltoallv plans run out of place");
  }
  // An empty buffer still takes part in the exchange of registrations: a stand-in nobody writes.
  CallBuffers& buffers = arguments.buffers;
  buffers = {call.input, call.output, call.inputBytes, call.outputBytes};
  if (buffers.inputBytes == 0) std::tie(buffers.input, buffers.inputBytes) = standIn();
  if (buffers.outputBytes == 0) std::tie(buffers.output, buffers.outputBytes) = standIn();
  if (gpuSharers.size() > 1 && stream == nullptr) {
    throw invalid("stream: ranks sharing one GPU each need a stream of their own");
  }
  if (backend->onGpu() && !gpuSharers.empty()) {
    checkResidency(plan, gpuSharers,
                   backend->maxResidentBlocks(plan.threadsPerBlock, DataType::kFloat32, ReduceOp::kSum), comm);
  }
  return arguments;
}

void Executor::executeCounted(const Plan& plan, const CountedCall& call, void* stream) {
  std::lock_guard lock(impl_->mutex);
  impl_->checkUsable();
  const CountedArguments arguments = impl_->countedArguments(plan, call, stream);
  // The ranks agree on the plan alone: every rank's sizes are its own.
  impl_->runRecordingFailure(plan, {plan.contentHash, 0, DataType::kFloat32, ReduceOp::kSum}, arguments.buffers, stream,
                             &arguments.table);
}

void Executor::executeCountedGroup(std::span<const GroupedCountedCall> calls, void* stream) {
  if (calls.size() > device::kMaxGroupedCalls) {
    throw invalid("calls: " + std::to_string(calls.size()) + " calls; one launch takes at most " +
                  std::to_string(device::kMaxGroupedCalls));
  }
  if (calls.size() == 1) {
    calls[0].executor->executeCounted(*calls[0].plan, calls[0].call, stream);
    return;
  }
  struct Item {
    Impl* impl;
    CountedArguments arguments;
    Impl::PreparedCall prepared;
  };
  // Every argument is checked before any call is set up: a set-up is collective over its pair, and a
  // refusal after it would leave that peer waiting.
  for (size_t i = 0; i < calls.size(); ++i) {
    const GroupedCountedCall& call = calls[i];
    const std::string which = "calls[" + std::to_string(i) + "]";
    if (call.executor == nullptr || call.plan == nullptr) throw invalid(which + ": null executor or plan");
    for (size_t j = 0; j < i; ++j) {
      if (calls[j].executor == call.executor) {
        throw invalid(which + ": the executor of calls[" + std::to_string(j) +
                      "] again; a group takes one call per executor");
      }
    }
    if (call.plan->worldSize != 2) {
      throw invalid(which + ": plan '" + call.plan->name + "' is of " + std::to_string(call.plan->worldSize) +
                    " ranks; a group takes calls of two-rank plans");
    }
    if (call.call.deviceEntries != nullptr)
      throw invalid(which + ".deviceEntries: a group takes entries given on the host");
    if (call.plan->threadsPerBlock != calls[0].plan->threadsPerBlock) {
      throw invalid(which + ": plan '" + call.plan->name + "' has " + std::to_string(call.plan->threadsPerBlock) +
                    " threads per block, calls[0]'s " + std::to_string(calls[0].plan->threadsPerBlock) +
                    "; one launch has one block size");
    }
  }
  std::vector<std::unique_lock<std::timed_mutex>> locks;
  std::vector<Item> items;
  items.reserve(calls.size());
  for (const GroupedCountedCall& call : calls) {
    Impl& impl = *call.executor->impl_;
    locks.emplace_back(impl.mutex);
    impl.checkUsable();
    items.push_back(Item{&impl, impl.countedArguments(*call.plan, call.call, stream), {}});
  }
  // The calls' set-ups (each collective over its two ranks) in the order given: callers take their pairs in
  // one global order, so that the first pair pending anywhere can always go on.
  for (size_t i = 0; i < calls.size(); ++i) {
    const Plan& plan = *calls[i].plan;
    try {
      items[i].prepared = items[i].impl->prepare(plan, {plan.contentHash, 0, DataType::kFloat32, ReduceOp::kSum},
                                                 items[i].arguments.buffers, stream);
    } catch (...) {
      items[i].impl->recordFailure();
    }
  }
  std::vector<GroupedLaunch> group;
  for (Item& item : items) group.push_back({item.impl->backend.get(), &item.prepared.program, &item.arguments.table});
  try {
    items[0].impl->backend->launchCountedGroup(group, items[0].prepared.threads, stream);
  } catch (...) {
    // Every member's calls are out of step now: each records the failure, explained by its own record.
    const std::exception_ptr failure = std::current_exception();
    std::exception_ptr first;
    for (Item& item : items) {
      const std::exception_ptr explained = item.impl->failureOfLaunch(failure);
      if (!first) first = explained;
    }
    std::rethrow_exception(first);
  }
  for (Item& item : items) {
    if (item.prepared.staged) item.impl->staging->stageOut();
    ++item.impl->stats.launches;
    ++item.impl->stats.groupedCalls;
  }
}

namespace {

// What each rank sends when windows are registered or dropped; `problem` is this rank's reason to refuse
// (every rank refuses together, so that none is left waiting for the others).
struct WindowRecord {
  uint64_t id = 0;
  uint64_t base = 0;
  uint64_t allocation = 0;
  uint64_t bytes = 0;
  char problem[96] = {};
};

std::vector<WindowRecord> gatherWindowRecords(Communicator& communicator, const WindowRecord& mine) {
  const auto all = communicator.bootstrap().allGather(std::span(reinterpret_cast<const uint8_t*>(&mine), sizeof(mine)));
  std::vector<WindowRecord> records(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != sizeof(WindowRecord)) {
      throw invalid("window: rank " + std::to_string(r) +
                    " is at another setup step (every rank registers and "
                    "deregisters its windows at the same calls)");
    }
    std::memcpy(&records[r], all[r].data(), sizeof(WindowRecord));
  }
  return records;
}

void setProblem(WindowRecord& record, const std::string& problem) {
  std::snprintf(record.problem, sizeof(record.problem), "%s", problem.c_str());
}

// Throws, on every rank alike, when any rank gave a problem or the ranks' `field`s differ.
void refuseWindowsOnProblems(const char* call, const std::vector<WindowRecord>& records, uint64_t WindowRecord::*field,
                             const char* fieldName) {
  std::string problems;
  for (size_t r = 0; r < records.size(); ++r) {
    if (records[r].problem[0] != 0) problems += "; rank " + std::to_string(r) + ": " + records[r].problem;
    if (records[r].*field != records[0].*field) {
      problems += "; rank " + std::to_string(r) + " gives " + fieldName + " " + std::to_string(records[r].*field) +
                  ", rank 0 " + std::to_string(records[0].*field);
    }
  }
  if (!problems.empty()) throw invalid(std::string(call) + ": refused on every rank" + problems);
}

}  // namespace

uint64_t Executor::registerWindow(void* base, uint64_t bytes) {
  std::lock_guard lock(impl_->mutex);
  impl_->checkUsable();
  Backend& backend = *impl_->backend;
  WindowRecord mine;
  mine.id = impl_->windows->nextId();
  mine.base = reinterpret_cast<uint64_t>(base);
  mine.allocation = base ? backend.allocationId(base) : 0;
  mine.bytes = bytes;
  if (base == nullptr) {
    setProblem(mine, "base: null pointer");
  } else if (bytes == 0) {
    setProblem(mine, "bytes: 0 (a window holds at least one byte)");
  } else if (impl_->windows->overlaps(base, bytes)) {
    setProblem(mine, "base: the " + std::to_string(bytes) + " bytes overlap a window this rank registered");
  } else if (mine.allocation != 0 && backend.allocationId(static_cast<uint8_t*>(base) + bytes - 1) != mine.allocation) {
    setProblem(mine, "bytes: the window runs past the end of the allocation at base");
  }
  const std::vector<WindowRecord> records = gatherWindowRecords(*impl_->communicator, mine);
  refuseWindowsOnProblems("registerWindow", records, &WindowRecord::bytes, "bytes");
  refuseWindowsOnProblems("registerWindow", records, &WindowRecord::id, "window id");
  SymmetricWindow window;
  window.id = mine.id;
  window.bytes = bytes;
  for (const WindowRecord& record : records) {
    window.bases.push_back(record.base);
    window.allocations.push_back(record.allocation);
  }
  impl_->windows->add(std::move(window));
  return mine.id;
}

void Executor::deregisterWindow(uint64_t window) {
  std::lock_guard lock(impl_->mutex);
  impl_->checkUsable();
  WindowRecord mine;
  mine.id = window;
  if (impl_->windows->byId(window) == nullptr)
    setProblem(mine, "window: " + std::to_string(window) + " is not registered");
  refuseWindowsOnProblems("deregisterWindow", gatherWindowRecords(*impl_->communicator, mine), &WindowRecord::id,
                          "window");
  const auto me = size_t(impl_->communicator->rank());
  const auto onWindow = [&](const CallContext& context) {
    const std::vector<RankBuffers>& setUp = context.setUpWith();
    return setUp.size() > me && (setUp[me].inputWindow == window || setUp[me].outputWindow == window);
  };
  // Calls in flight may still use the window's contexts (a graph replaying them after this is the caller's error,
  // as it is NCCL's).
  impl_->quiesce(nullptr, "a symmetric window is deregistered", [&] {
    for (auto& [hash, entry] : impl_->plans) dropContexts(entry.first, onWindow);
    impl_->windows->remove(window);
  });
}

std::optional<Error> Executor::asyncError() const {
  if (const std::string failed = impl_->failureText(); !failed.empty()) {
    return Error(ErrorCategory::kTransport, "an earlier call failed: " + failed);
  }
  if (std::optional<std::string> stopped = impl_->cleanDeviceStop()) {
    return Error(ErrorCategory::kTransport,
                 "a call stopped on the device: " + *stopped + "; the communicator must be aborted and created anew");
  }
  // A kernel of this rank trapped (a wait that timed out): its record says where; the next call names the
  // plan op and, for a packet read, the peer whose packet did not come.
  if (impl_->backend->onGpu() && impl_->communicator->deviceDiagnostics().faultedHere()) {
    if (std::optional<std::string> trapped = impl_->communicator->deviceDiagnostics().report()) {
      std::shared_ptr<const Plan> plan;
      {
        std::lock_guard lock(impl_->failureMutex);
        plan = impl_->lastLaunch.plan;
      }
      const Error error(ErrorCategory::kTimeout, "a call trapped on the device: " + *trapped);
      const Error named = plan ? impl_->withOpContext(*plan, error) : error;
      return Error(ErrorCategory::kTimeout,
                   std::string(named.what()) + "; the communicator must be aborted and created anew");
    }
  }
  if (std::optional<std::string> links = impl_->communicator->deviceDiagnostics().failedLinks()) {
    return Error(ErrorCategory::kTransport, "rank " + std::to_string(impl_->communicator->rank()) + ": " + *links);
  }
  std::optional<std::vector<int>> departed;
  try {
    if (auto failure = impl_->communicator->bootstrap().announcedFailureIfIdle()) {
      return Error(ErrorCategory::kTransport, "rank " + std::to_string(impl_->communicator->rank()) + ": rank " +
                                                  std::to_string(failure->first) + "'s call failed: " +
                                                  failure->second +
                                                  "; the communicator must be aborted and created anew");
    }
    departed = impl_->communicator->bootstrap().lostPeersIfIdle();
    if (const auto links = impl_->communicator->bootstrap().lostLinksIfIdle(); links && !links->empty()) {
      return Error(ErrorCategory::kTransport, "rank " + std::to_string(impl_->communicator->rank()) + ": " +
                                                  links->begin()->second +
                                                  "; the communicator must be aborted and created anew");
    }
    const std::optional<std::vector<int>> aborted = impl_->communicator->bootstrap().abortedPeersIfIdle();
    if (aborted && !aborted->empty()) {
      return Error(ErrorCategory::kTransport, "rank " + std::to_string(impl_->communicator->rank()) + ": " +
                                                  rankList(*aborted) +
                                                  " announced an abort of the communicator; the communicator must "
                                                  "be aborted and created anew");
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (!departed || departed->empty()) return std::nullopt;
  return Error(ErrorCategory::kTransport, "rank " + std::to_string(impl_->communicator->rank()) + ": " +
                                              rankList(*departed) +
                                              " closed the bootstrap connection to this rank without a goodbye "
                                              "(killed or crashed?); the communicator must be aborted and created "
                                              "anew");
}

bool Executor::abort(int64_t waitMs) {
  impl_->aborted = true;
  impl_->communicator->abort();
  // A call in flight sees the abort within about 100 ms (host waits, bootstrap waits) and returns.
  std::unique_lock lock(impl_->mutex, std::defer_lock);
  if (!lock.try_lock_for(std::chrono::milliseconds(waitMs))) return false;
  impl_->release();
  return true;
}

}  // namespace loom
