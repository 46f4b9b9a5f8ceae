#include "windows.hpp"

#ifdef LOOM_NCCL_HAS_NCCLCOMMWINDOWREGISTER

#include <memory>
#include <string>

#include "group.hpp"
#include "log.hpp"
#include "result.hpp"

namespace loom::nccl {
namespace {

// What an ncclWindow_t of this library points at: both sides' windows.
struct Window {
  static constexpr uint64_t kMagic = 0x574f444e49574c4cull;  // "LLWINDOW"
  uint64_t magic = kMagic;
  const ncclComm* comm = nullptr;
  ncclWindow_t real = nullptr;  // the real NCCL's (null: none)
  uint64_t loom = 0;            // the executor's handle (0: none)
  ~Window() { magic = 0; }
};

Window& windowOf(const ncclComm& comm, ncclWindow_t handle) {
  auto* window = reinterpret_cast<Window*>(handle);
  if (window == nullptr || window->magic != Window::kMagic) {
    throw Failure(ncclInvalidArgument, "win: not a window this library registered");
  }
  if (window->comm != &comm) throw Failure(ncclInvalidArgument, "win: registered on another communicator");
  return *window;
}

void note(const ncclComm& comm, const std::string& message) {
  if (logEnabled(LogLevel::kInfo)) logLine(LogLevel::kInfo, comm.cudaDevice, message);
}

}  // namespace

ncclWindow_t registerWindow(ncclComm& comm, void* buffer, size_t bytes, int flags) {
  auto window = std::make_unique<Window>();
  window->comm = &comm;
  if (comm.realComm != nullptr && comm.real->ncclCommWindowRegister != nullptr) {
    checkReal(comm, comm.real->ncclCommWindowRegister(comm.realComm, buffer, bytes, &window->real, flags),
              "ncclCommWindowRegister");
  }
  const std::string what =
      "ncclCommWindowRegister of comm " + std::to_string(comm.serial) + ": " + std::to_string(bytes) + " bytes";
  if (comm.executor == nullptr) {
    note(comm, what + ", the real NCCL's only (Loom's side is off)");
  } else if ((flags & NCCL_WIN_COLL_SYMMETRIC) == 0) {
    note(comm, what + ", the real NCCL's only (not NCCL_WIN_COLL_SYMMETRIC: Loom's calls exchange addresses)");
  } else if (inGroup()) {
    note(comm, what + ", the real NCCL's only (inside a group: Loom's calls exchange addresses)");
  } else {
    try {
      window->loom = comm.executor->registerWindow(buffer, bytes);
    } catch (...) {
      if (window->real != nullptr) comm.real->ncclCommWindowDeregister(comm.realComm, window->real);
      throw;
    }
    note(comm, what + ", Loom's symmetric window " + std::to_string(window->loom));
  }
  return reinterpret_cast<ncclWindow_t>(window.release());
}

void deregisterWindow(ncclComm& comm, ncclWindow_t handle) {
  Window& window = windowOf(comm, handle);
  std::unique_ptr<Window> owned(&window);
  if (window.loom != 0 && comm.executor != nullptr) {
    comm.executor->deregisterWindow(window.loom);
    const ExecutorStats stats = comm.executor->stats();
    note(comm, "ncclCommWindowDeregister of comm " + std::to_string(comm.serial) + ": Loom's symmetric window " +
                   std::to_string(window.loom) + " (so far on this communicator: " + std::to_string(stats.windowCalls) +
                   " calls found their buffers in windows, " + std::to_string(stats.bufferExchanges) +
                   " exchanged addresses)");
  }
  if (window.real != nullptr) {
    checkReal(comm, comm.real->ncclCommWindowDeregister(comm.realComm, window.real), "ncclCommWindowDeregister");
  }
}

}  // namespace loom::nccl

#endif
