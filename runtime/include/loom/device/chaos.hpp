#pragma once

// LOOM_CPU_CHAOS=<seed>: the CPU backend as a scheduler that tries to break plans, the verifier's
// differential test. Where a GPU's timing may differ from the host's, a host thread pauses for a random
// while: a thread block before it starts and before each op (blocks run in shuffled orders, a rank runs
// ahead of its peers by as many calls as its waits let it), the proxy before it reads a put's source and
// before it signals (its reads and signals come late). A plan the verifier passes must stay right under
// every seed; one that is not (a port source reused before its flush, a missing wait) shows wrong results.
// Off (the default), a pause is one load of a flag. Nothing of it reaches the device pass.

#include "loom/device/macros.hpp"

namespace loom::chaos {

// Where the pause is: each site draws from its own distribution of delays.
enum class Site {
  kBlockStart,   // a CPU-backend thread block, before its first op
  kOp,           // an interpreted op, before it runs
  kProxyRead,    // the proxy, before it reads a put's source
  kProxySignal,  // the proxy, before it raises a semaphore on the peer
};

#if !LOOM_DEVICE_PASS
// The seed, parsed once (off when LOOM_CPU_CHAOS is unset); a malformed value is an error naming the variable.
bool enabled();
void pauseAt(Site site);
inline void pause(Site site) {
  if (enabled()) pauseAt(site);
}
#endif

// An op of the interpreter pauses on the host only.
LOOM_HOST_DEVICE void pauseBeforeOp() {
#if !LOOM_DEVICE_PASS
  pause(Site::kOp);
#endif
}

}  // namespace loom::chaos
