#pragma once

// ncclGroupStart/End. Inside a group (per thread, nested as in NCCL) a call that goes to Loom is
// held and run at the outermost ncclGroupEnd, in call order; one forwarded goes to the real NCCL at
// once, inside the real NCCL's group, which this library opens and closes alongside its own. A
// communicator created inside a group (ncclCommInitAll, several ranks from one thread) connects at
// ncclGroupEnd, every rank of the group on a thread of its own.

#include "nccl_comm.hpp"

namespace loom::nccl {

bool inGroup();
ncclResult_t groupStart();
ncclResult_t groupEnd();
// ncclGroupSimulateEnd: closes the group without running what it holds (NCCL runs nothing either).
ncclResult_t groupSimulateEnd(ncclSimInfo_t* simInfo);

void holdInit(ncclComm* comm);
void holdCall(ncclComm* comm, const PendingCall& call, const Decision& decision);

}  // namespace loom::nccl
