#pragma once

// ncclCommWindowRegister/Deregister on Loom. A window registered with NCCL_WIN_COLL_SYMMETRIC becomes a
// symmetric window of the communicator's executor (Executor::registerWindow): Loom's calls whose buffers
// lie in such windows exchange no addresses once a plan has set up on them. The real NCCL registers the
// window too, for the calls it runs. Windows registered inside ncclGroupStart/End (several ranks driven by
// one thread) and windows without the symmetric flag are the real NCCL's only: Loom's calls on them
// exchange addresses as on any buffer.

#include <nccl.h>

#include "nccl_comm.hpp"

#ifdef LOOM_NCCL_HAS_NCCLCOMMWINDOWREGISTER

namespace loom::nccl {

ncclWindow_t registerWindow(ncclComm& comm, void* buffer, size_t bytes, int flags);
void deregisterWindow(ncclComm& comm, ncclWindow_t window);

}  // namespace loom::nccl

#endif
