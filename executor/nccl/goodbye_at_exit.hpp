#pragma once

// A process that exits with communicators still open (torch often leaves them) closes their bootstrap
// connections without a goodbye, which peers still running would count as a lost rank: an asynchronous error
// (ncclCommGetAsyncError) where the job only ended. So the bootstraps of this process's communicators, links
// included, are kept (weakly) here, and at exit each open one says goodbye (Bootstrap::sayGoodbye).

#include <memory>

#include "loom/bootstrap.hpp"

namespace loom::nccl {

void sayGoodbyeAtExit(const std::shared_ptr<Bootstrap>& bootstrap);

}  // namespace loom::nccl
