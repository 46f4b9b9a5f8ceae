#pragma once

// libibverbs is opened with dlopen at run time, never linked, so that a host without it still runs
// everything except the InfiniBand transport.

#include <string>
#include <vector>

namespace loom {

struct IbverbsStatus {
  bool loaded = false;
  std::string reason;                // why it is not loaded (dlopen/dlsym message)
  std::vector<std::string> devices;  // RDMA devices the library reports, e.g. "mlx5_0"
};

IbverbsStatus ibverbsStatus();

}  // namespace loom
