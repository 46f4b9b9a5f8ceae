#include "real_nccl.hpp"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace loom::nccl {
namespace {

std::string realPath(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return path;
  return resolved;
}

// The file this library was loaded from, to refuse opening ourselves as "the real NCCL" (a
// libloom_nccl.so installed as libnccl.so.2, or named by LOOM_NCCL_LIBRARY by mistake).
std::string thisLibrary() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&thisLibrary), &info) == 0 || info.dli_fname == nullptr) return "";
  return realPath(info.dli_fname);
}

std::string objectPath(void* handle, const char* fallback) {
  void* symbol = dlsym(handle, "ncclGetVersion");
  Dl_info info{};
  if (symbol != nullptr && dladdr(symbol, &info) != 0 && info.dli_fname != nullptr) return realPath(info.dli_fname);
  return realPath(fallback);
}

struct Opened {
  RealNccl nccl;
  void* handle = nullptr;
};

// RTLD_LOCAL: the real NCCL's symbols must not take the place of ours for anyone else.
void* openIfNotSelf(const std::string& name, const std::string& self, std::string* path, std::string* error) {
  // RTLD_DEEPBIND: the real NCCL's calls of its own API (ncclCommFinalize calls ncclCommGetAsyncError)
  // must reach itself, not this library's exports, which take a Loom communicator (a SIGSEGV in torch's
  // destroy_process_group on the lent H200 before this).
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (handle == nullptr) {
    const char* text = dlerror();
    *error = text != nullptr ? text : "dlopen failed";
    return nullptr;
  }
  *path = objectPath(handle, name.c_str());
  if (!self.empty() && *path == self) {
    dlclose(handle);
    *error = name + " is this library (" + self + ")";
    return nullptr;
  }
  return handle;
}

std::vector<std::string> searchFolders() {
  std::vector<std::string> folders;
  if (const char* paths = std::getenv("LD_LIBRARY_PATH")) {
    std::string text(paths);
    size_t start = 0;
    while (start <= text.size()) {
      const size_t colon = text.find(':', start);
      const std::string folder = text.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      if (!folder.empty()) folders.push_back(folder);
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  for (const char* folder : {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/lib", "/usr/local/cuda/lib64",
                             "/usr/local/cuda/lib", "/usr/lib/aarch64-linux-gnu"}) {
    folders.push_back(folder);
  }
  return folders;
}

std::unique_ptr<Opened> open(const std::string& library, std::string* whyNot) {
  if (library == "none") {
    *whyNot = "LOOM_NCCL_LIBRARY=none";
    return nullptr;
  }
  const std::string self = thisLibrary();
  std::string path, error;
  void* handle = nullptr;
  if (!library.empty()) {
    handle = openIfNotSelf(library, self, &path, &error);
    if (handle == nullptr) {
      *whyNot = "LOOM_NCCL_LIBRARY=" + library + ": " + error;
      return nullptr;
    }
  } else {
    std::string tried;
    handle = openIfNotSelf("libnccl.so.2", self, &path, &error);
    if (handle == nullptr) tried = "libnccl.so.2: " + error;
    for (const std::string& folder : handle == nullptr ? searchFolders() : std::vector<std::string>{}) {
      handle = openIfNotSelf(folder + "/libnccl.so.2", self, &path, &error);
      if (handle != nullptr) break;
    }
    if (handle == nullptr) {
      *whyNot = "no real libnccl.so.2 found (" + tried +
                "; nor in LD_LIBRARY_PATH or the CUDA folders); set LOOM_NCCL_LIBRARY to its path";
      return nullptr;
    }
  }
  auto opened = std::make_unique<Opened>();
  opened->handle = handle;
  opened->nccl.path = path;
#define LOOM_REAL_NCCL_LOAD(name) opened->nccl.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));
  LOOM_REAL_NCCL_FUNCTIONS(LOOM_REAL_NCCL_LOAD)
#undef LOOM_REAL_NCCL_LOAD
  if (opened->nccl.ncclGetVersion == nullptr || opened->nccl.ncclCommInitRankConfig == nullptr ||
      opened->nccl.ncclGetUniqueId == nullptr) {
    *whyNot = path + " is not an NCCL of version 2.14 or later (no ncclCommInitRankConfig)";
    dlclose(handle);
    return nullptr;
  }
  opened->nccl.ncclGetVersion(&opened->nccl.version);
  return opened;
}

std::once_flag openOnce;
std::unique_ptr<Opened> opened;
std::string openError;

}  // namespace

const RealNccl* realNccl(std::string* whyNot) {
  std::call_once(openOnce, [] {
    const char* library = std::getenv("LOOM_NCCL_LIBRARY");
    opened = open(library != nullptr ? library : "", &openError);
  });
  if (!opened) {
    if (whyNot != nullptr) *whyNot = openError;
    return nullptr;
  }
  return &opened->nccl;
}

}  // namespace loom::nccl
