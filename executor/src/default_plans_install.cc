#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "gzip.hpp"
#include "loom/default_plans.hpp"
#include "loom/error.hpp"
#include "loom/plan.hpp"
#include "loom/plan_registry.hpp"
#include "plan_index.hpp"

// Set by executor/CMakeLists.txt for this file alone.
#ifndef LOOM_VERSION
#error "LOOM_VERSION (the project version) is not defined"
#endif

namespace loom {
namespace {

namespace fs = std::filesystem;

// The second line of the stamp: how the plans are installed. A folder installed another way (by a
// Loom that wrote plain NAME.json files and no index, or an index of another format) has another stamp, so
// it is installed again.
constexpr char kLayout[] = "layout NAME.json.gz, .index 3";
constexpr char kLockName[] = ".install.lock";
// The plan files the last install wrote, one name a line: all that a later install may remove.
constexpr char kManifestName[] = ".manifest";

Error systemError(const std::string& what, const fs::path& path, int code) {
  return Error(ErrorCategory::kSystem, what + " '" + path.string() + "': " + std::strerror(code));
}

std::optional<std::string> readFile(const fs::path& path) {
  std::error_code error;
  if (fs::symlink_status(path, error).type() == fs::file_type::symlink) return std::nullopt;  // never followed
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) throw systemError("cannot read", path, errno);
  return text.str();
}

// The whole file or nothing: written under a temporary name that the registry does not read (it
// starts with a dot and ends in .tmp), then renamed over `path`.
void writeAtomically(const fs::path& path, std::string_view bytes) {
  std::string name = path.filename().string();  // appended to, not "." + name: GCC 12 warns wrongly there
  name.insert(0, 1, '.');
  name += ".XXXXXX.tmp";
  std::string temporary = (path.parent_path() / name).string();
  const int fd = mkstemps(temporary.data(), 4);
  if (fd < 0) throw systemError("cannot create a file in", path.parent_path(), errno);
  int failure = fchmod(fd, 0644) == 0 ? 0 : errno;  // mkstemps makes it private; a shared cache must be readable
  for (size_t done = 0; failure == 0 && done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) failure = n < 0 ? errno : EIO;
    if (n > 0) done += size_t(n);
  }
  if (::close(fd) != 0 && failure == 0) failure = errno;
  if (failure == 0 && std::rename(temporary.c_str(), path.c_str()) != 0) failure = errno;
  if (failure != 0) {
    ::unlink(temporary.c_str());
    throw systemError("cannot write", path, failure);
  }
}

// The size of the JSON a bundled plan file holds: a plain file's size, or for gzip the size its trailer
// records (ISIZE, the uncompressed size modulo 2^32; plans are far smaller), read without decompressing.
uint64_t jsonBytes(const fs::path& file) {
  std::error_code error;
  const uintmax_t bytes = fs::file_size(file, error);
  if (error) throw systemError("cannot read", file, error.value());
  if (!file.string().ends_with(".gz")) return bytes;
  std::ifstream in(file, std::ios::binary);
  unsigned char trailer[4] = {};
  if (bytes < 18 || !in.seekg(std::streamoff(bytes - 4)) || !in.read(reinterpret_cast<char*>(trailer), 4)) {
    throw Error(ErrorCategory::kInvalidArgument, "'" + file.string() + "' is too short to be gzip");
  }
  return uint64_t{trailer[0]} | uint64_t{trailer[1]} << 8 | uint64_t{trailer[2]} << 16 | uint64_t{trailer[3]} << 24;
}

bool isPlanFile(const std::string& name) { return name.ends_with(".json") || name.ends_with(".json.gz"); }

std::string installedName(const std::string& bundledName) {
  return bundledName.ends_with(".gz") ? bundledName : bundledName + ".gz";
}

// Whether `existing` (an installed file) already holds `json`.
bool holds(const std::optional<std::string>& existing, const std::string& json) {
  if (!existing || !isGzip(*existing)) return false;
  try {
    return gzipDecompress(*existing, json.size(), "<installed>") == json;
  } catch (const Error&) {
    return false;  // damaged, or longer than the plan: written again
  }
}

struct InstalledPlan {
  std::string path;
  std::optional<PlanIndexEntry> entry;  // none for a plan that does not decode
};

// One bundled plan into `target`: decompressed, compressed and decoded (for its index entry) on its own, so
// that plans install in parallel.
InstalledPlan installOne(const std::string& source, const std::string& target, bool force) {
  const std::optional<std::string> raw = readFile(source);
  if (!raw) throw systemError("cannot read", source, errno);
  const std::string json = isGzip(*raw) ? gzipDecompress(*raw, maxPlanBytes(), source) : *raw;
  const fs::path destination = fs::path(target) / installedName(fs::path(source).filename().string());
  std::optional<std::string> existing = readFile(destination);
  if (force || !holds(existing, json)) {
    existing = isGzip(*raw) ? *raw : gzipCompress(json);
    writeAtomically(destination, *existing);
  }
  InstalledPlan result{destination.string(), std::nullopt};
  // A bundled plan that does not decode is installed all the same, but left out of the index: the
  // registry then decodes it when it loads the folder, and reports why it skips it.
  try {
    const Plan plan = Plan::parse(json, source);
    result.entry =
        PlanIndexEntry{destination.filename().string(), existing->size(), planInfoFrom(plan, PlanSource::kBundled)};
  } catch (const Error&) {
  }
  return result;
}

// work(0 .. count - 1) on up to 8 threads (the cores there are); the first exception is rethrown after all end.
void forEachInParallel(size_t count, const std::function<void(size_t)>& work) {
  const size_t threads = std::min<size_t>({count, 8, std::max(1u, std::thread::hardware_concurrency())});
  std::atomic<size_t> next{0};
  std::mutex failureMutex;
  std::exception_ptr failure;
  auto run = [&] {
    for (size_t i = next++; i < count; i = next++) {
      try {
        work(i);
      } catch (...) {
        std::lock_guard lock(failureMutex);
        if (!failure) failure = std::current_exception();
        next = count;  // the others stop at their next item
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(run);
  run();
  for (std::thread& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

// flock on <target>/.install.lock, held for the object's life: ranks of one host that all find no
// stamp install one after another, and the later ones find the stamp.
class InstallLock {
 public:
  // Never through a symbolic link: a link planted in a shared cache would have the installer create or lock
  // a file elsewhere.
  explicit InstallLock(const fs::path& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644)) {
    if (fd_ < 0) throw systemError("cannot open", path, errno);
    // Where the file system has no locks (ENOLCK, some network mounts) it goes on unlocked: every
    // write is atomic, so ranks installing at once only repeat each other's work.
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~InstallLock() { ::close(fd_); }
  InstallLock(const InstallLock&) = delete;
  InstallLock& operator=(const InstallLock&) = delete;

 private:
  int fd_;
};

// The plan files an earlier install wrote into `target`: its manifest, else (a Loom that kept none) the
// names its stamp lists; empty when neither is there.
std::set<std::string> previouslyInstalled(const fs::path& target) {
  std::set<std::string> names;
  std::optional<std::string> text = readFile(target / kManifestName);
  if (!text) text = readFile(target / kInstalledStampName);  // its version and layout lines name no plan file
  if (!text) return names;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string name = line.substr(0, line.find(' '));
    if (isPlanFile(name) && name.find('/') == std::string::npos) names.insert(name);
  }
  return names;
}

bool hasPlans(const fs::path& folder) {
  std::error_code error;
  for (const auto& item : fs::directory_iterator(folder, error)) {
    if (isPlanFile(item.path().filename().string())) return true;
  }
  return false;
}

}  // namespace

std::string bundledPlansDirectory() {
  std::vector<fs::path> candidates;
#ifdef LOOM_SOURCE_PLANS_DIR
  candidates.emplace_back(LOOM_SOURCE_PLANS_DIR);
#endif
  Dl_info library{};
  if (dladdr(reinterpret_cast<void*>(&bundledPlansDirectory), &library) != 0 && library.dli_fname != nullptr) {
    candidates.push_back(fs::absolute(library.dli_fname).parent_path() / "default_plans");
  }
  std::string looked;
  for (const fs::path& candidate : candidates) {
    if (hasPlans(candidate)) return candidate.string();
    looked += (looked.empty() ? "" : ", ") + candidate.string();
  }
  throw Error(ErrorCategory::kInvalidArgument,
              "the bundled default plans are not where this Loom was built or installed (looked in " + looked +
                  "); in a source checkout, run python plans/build_default_plans.py");
}

std::vector<std::string> bundledPlanFiles(const std::string& bundled) {
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(bundled, error)) {
    if (isPlanFile(item.path().filename().string()) && item.is_regular_file(error)) files.push_back(item.path());
  }
  std::sort(files.begin(), files.end());
  // NAME.json and NAME.json.gz would install as one file: the first (NAME.json) is the plan.
  std::set<std::string> seen;
  std::erase_if(files, [&](const std::string& file) {
    return !seen.insert(installedName(fs::path(file).filename().string())).second;
  });
  return files;
}

std::string installedStamp(const std::string& bundled) {
  // Per plan its installed name and its JSON's size, whichever form it is bundled in: a checkout's NAME.json
  // and a wheel's NAME.json.gz of the same plans stamp alike, so the Python package and libloom_nccl.so
  // (which may find the plans in either place) do not reinstall the folder over each other's stamp.
  std::string stamp = std::string("loom ") + LOOM_VERSION + "\n" + kLayout + "\n";
  for (const std::string& file : bundledPlanFiles(bundled)) {
    stamp += installedName(fs::path(file).filename().string()) + " " + std::to_string(jsonBytes(file)) + "\n";
  }
  return stamp;
}

std::vector<std::string> installDefaultPlans(const std::string& bundled, const std::string& target, bool force) {
  const std::vector<std::string> sources = bundledPlanFiles(bundled);
  if (sources.empty()) throw Error(ErrorCategory::kInvalidArgument, "no bundled plans in '" + bundled + "'");
  const std::string stamp = installedStamp(bundled);
  std::error_code error;
  fs::create_directories(target, error);
  if (error) throw systemError("cannot create", target, error.value());

  std::vector<InstalledPlan> results(sources.size());
  forEachInParallel(sources.size(), [&](size_t i) { results[i] = installOne(sources[i], target, force); });
  std::vector<std::string> installed;
  std::vector<PlanIndexEntry> index;
  for (InstalledPlan& result : results) {
    installed.push_back(std::move(result.path));
    if (result.entry) index.push_back(std::move(*result.entry));
  }

  std::set<std::string> names;
  for (const std::string& file : installed) names.insert(fs::path(file).filename().string());
  // Only what an install wrote goes: the plans the last install's manifest lists (or, from a Loom that kept
  // none, its stamp) that are no longer bundled, and only as the regular files it wrote. Anything else in
  // the folder is the user's: left alone, and named.
  const std::set<std::string> before = previouslyInstalled(fs::path(target));
  std::vector<std::string> unknown;
  for (const auto& item : fs::directory_iterator(target, error)) {
    const std::string name = item.path().filename().string();
    if (!isPlanFile(name) || names.count(name) != 0) continue;
    std::error_code ignored;  // another rank of this host may have removed it already
    if (before.count(name) != 0 && fs::symlink_status(item.path(), ignored).type() == fs::file_type::regular) {
      fs::remove(item.path(), ignored);
    } else {
      unknown.push_back(name);
    }
  }
  if (!unknown.empty()) {
    std::sort(unknown.begin(), unknown.end());
    std::string list;
    for (const std::string& name : unknown) list += (list.empty() ? "" : ", ") + name;
    std::fprintf(stderr,
                 "loom: warning: %s holds files the installer did not write, left alone (and registered as bundled "
                 "plans if they are plans): %s\n",
                 target.c_str(), list.c_str());
  }
  std::string manifest;
  for (const std::string& name : names) manifest += name + "\n";
  writeAtomically(fs::path(target) / kManifestName, manifest);
  writeAtomically(fs::path(target) / kPlanIndexName, planIndexText(index));
  writeAtomically(fs::path(target) / kInstalledStampName, stamp);
  return installed;
}

bool ensureDefaultPlansInstalled(const std::string& bundled, const std::string& target) {
  const std::string stamp = installedStamp(bundled);
  const fs::path stampPath = fs::path(target) / kInstalledStampName;
  if (readFile(stampPath) == stamp) return false;
  std::error_code error;
  fs::create_directories(target, error);
  if (error) throw systemError("cannot create", target, error.value());
  InstallLock lock(fs::path(target) / kLockName);
  if (readFile(stampPath) == stamp) return false;  // installed by another process while this one waited
  installDefaultPlans(bundled, target);
  return true;
}

}  // namespace loom
