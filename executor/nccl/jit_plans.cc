#include "jit_plans.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "log.hpp"
#include "loom/plan_registry.hpp"  // planFits, planInfoFrom
#include "nccl_comm.hpp"

extern char** environ;

namespace loom::nccl {
namespace {

std::string pythonInterpreter() {
  if (const char* chosen = std::getenv("LOOM_PYTHON"); chosen != nullptr && *chosen != '\0') return chosen;
#ifdef LOOM_PYTHON_EXECUTABLE
  if (::access(LOOM_PYTHON_EXECUTABLE, X_OK) == 0) return LOOM_PYTHON_EXECUTABLE;
#endif
  return "python3";
}

struct Finished {
  bool ran = false;  // started and ended by itself within the time
  int status = -1;   // exit status when it ran
  std::string out;
  std::string problem;  // why it did not run or end
};

// Runs `argv` (found on PATH) with this process's environment less LD_PRELOAD (the compiler needs no
// NCCL), reads what it prints, and kills it past `timeoutMs`.
Finished runProgram(const std::vector<std::string>& argv, int64_t timeoutMs) {
  Finished finished;
  int pipeEnds[2];
  if (::pipe2(pipeEnds, O_CLOEXEC) != 0) {
    finished.problem = std::string("pipe: ") + std::strerror(errno);
    return finished;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<char*> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (std::strncmp(*entry, "LD_PRELOAD=", 11) != 0) environment.push_back(*entry);
  }
  environment.push_back(nullptr);
  pid_t child = -1;
  const int spawned = posix_spawnp(&child, args[0], &actions, nullptr, args.data(), environment.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipeEnds[1]);
  if (spawned != 0) {
    ::close(pipeEnds[0]);
    finished.problem = "cannot start " + argv[0] + ": " + std::strerror(spawned);
    return finished;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  char buffer[4096];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd wait{pipeEnds[0], POLLIN, 0};
    if (::poll(&wait, 1, int(std::min<int64_t>(left.count(), 1000))) <= 0) continue;
    const ssize_t got = ::read(pipeEnds[0], buffer, sizeof(buffer));
    if (got <= 0) break;  // the child closed its end: it is done
    finished.out.append(buffer, size_t(got));
  }
  ::close(pipeEnds[0]);
  int status = 0;
  if (std::chrono::steady_clock::now() >= deadline) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    finished.problem = argv[0] + " ran past " + std::to_string(timeoutMs) + " ms and was stopped";
    return finished;
  }
  ::waitpid(child, &status, 0);
  finished.ran = WIFEXITED(status);
  finished.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (!finished.ran) finished.problem = argv[0] + " died by signal " + std::to_string(WTERMSIG(status));
  return finished;
}

std::string lastLine(const std::string& text) {
  std::string trimmed = text;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
  return trimmed.substr(trimmed.rfind('\n') == std::string::npos ? 0 : trimmed.rfind('\n') + 1);
}

// Rank 0's part: "P" and the plan's text, or why there is none: "E" the compile failed, "S" the library
// has no algorithm for the shape, "B" none for this size (`loom jit-plan`'s exit statuses 3 and 4).
std::string runJitPlan(const ncclComm& comm, const std::vector<std::string>& options) {
  const std::string python = pythonInterpreter();
  std::vector<std::string> argv = {python, "-m", "loom", "jit-plan"};
  argv.insert(argv.end(), options.begin(), options.end());
  // Within the bootstrap's timeout, which the other ranks wait under meanwhile.
  const int64_t timeoutMs = std::max<int64_t>(1000, comm.bootstrap->timeoutMs() - 2000);
  const Finished finished = runProgram(argv, timeoutMs);
  if (!finished.ran) return "E" + finished.problem;
  if (finished.status == 3 || finished.status == 4) {
    return std::string(finished.status == 3 ? "S" : "B").append(lastLine(finished.out));
  }
  if (finished.status != 0) {
    return "E" + python + " -m loom jit-plan failed (exit " + std::to_string(finished.status) +
           "): " + lastLine(finished.out);
  }
  const std::string path = lastLine(finished.out);
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  if (!file || text.str().empty()) return "E" + python + " -m loom jit-plan printed '" + path + "', not a plan file";
  return "P" + text.str();
}

std::string compileOnRankZero(const ncclComm& comm, const SelectionRequest& request) {
  std::vector<std::string> options = {"--collective",     std::string(collectiveName(request.collective)),
                                      "--world-size",     std::to_string(request.worldSize),
                                      "--ranks-per-node", std::to_string(request.ranksPerNode),
                                      "--bytes",          std::to_string(request.messageBytes)};
  if (request.inplace) options.push_back("--inplace");
  if (request.root) options.insert(options.end(), {"--root", std::to_string(*request.root)});
  if (request.placement.limited()) {
    options.insert(options.end(), {"--max-thread-blocks", std::to_string(request.placement.threadBlocksPerRank())});
  }
  return runJitPlan(comm, options);
}

// Rank 0's reply, as every rank of `comm` gets it (collective over the communicator). Every message starts
// with what it is for (`purpose`): a rank at another exchange (another root, a call this rank skipped) is
// named in the reply "E ranks disagree: ...", never read as a plan.
std::string fromRankZero(ncclComm& comm, const std::string& purpose, const std::string& mine) {
  const std::string header = "loom JIT plan for " + purpose + "\n";
  const std::string sent = header + mine;
  const auto all = comm.bootstrap->allGather(std::span(reinterpret_cast<const uint8_t*>(sent.data()), sent.size()));
  std::string differing;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string theirs(all[r].begin(), all[r].end());
    if (theirs.starts_with(header)) continue;
    const std::string what = theirs.starts_with("loom ") ? theirs.substr(0, std::min<size_t>(theirs.find('\n'), 200))
                                                         : std::string("another exchange");
    differing += "; rank " + std::to_string(r) + " is at " + what;
  }
  if (!differing.empty()) {
    return "Eranks disagree: rank " + std::to_string(comm.rank) + " asks for a JIT plan for " + purpose + differing +
           " (every rank must make the same calls in the same order, with the same root)";
  }
  return std::string(all[0].begin() + std::ptrdiff_t(header.size()), all[0].end());
}

std::string failureKey(const SelectionRequest& request) {
  return std::string(collectiveName(request.collective)) + (request.inplace ? " in place" : "") +
         (request.root ? " root " + std::to_string(*request.root) : "");
}

}  // namespace

bool useJitPlan(ncclComm& comm, const CallInfo& call, Decision& decision) {
  const SelectionRequest request = selectionRequestFor(call, decision.collective, decision.dataType, decision.op);
  std::shared_ptr<const Plan> plan;
  for (const auto& kept : comm.jit.plans) {
    if (planFits(kept.info, request)) plan = kept.plan;
  }
  if (!plan) {
    const std::string key = failureKey(request);
    const std::string sizedKey = key + " of " + std::to_string(request.messageBytes) + " bytes";
    for (const std::string& known : {key, sizedKey}) {
      if (auto found = comm.jit.missing.find(known); found != comm.jit.missing.end()) {
        decision.reason = found->second.reason;
        return false;
      }
    }
    // Inside a group the exchange with the other ranks would wait for communicators of this thread whose
    // calls come later in the group: the call waits for ncclGroupEnd, where each communicator's calls run
    // side by side (runDeferredJit).
    if (call.grouped) {
      decision.jitAtGroupEnd = true;
      return false;
    }
    const std::string sent =
        fromRankZero(comm, key, comm.rank == 0 ? compileOnRankZero(comm, request) : std::string());
    const std::string who = "rank " + std::to_string(comm.rank) + "/" + std::to_string(comm.worldSize);
    if (!sent.empty() && (sent[0] == 'S' || sent[0] == 'B')) {
      // Not a failure: the library has no algorithm for it (more ranks than it runs, above 1 GiB).
      comm.jit.missing.emplace(sent[0] == 'S' ? key : sizedKey, JitPlans::Missing{Reason::kNoPlan, sent.substr(1)});
      logLine(LogLevel::kInfo, comm.cudaDevice, who + ": such calls go to NCCL: " + sent.substr(1));
      decision.reason = Reason::kNoPlan;
      return false;
    }
    if (sent.empty() || sent[0] != 'P') {
      const std::string why = sent.empty() ? "rank 0 sent nothing" : sent.substr(1);
      comm.jit.missing.emplace(key, JitPlans::Missing{Reason::kJitFailed, why});
      logLine(LogLevel::kWarn, comm.cudaDevice,
              who + ": no plan for " + key + " over this shape could be compiled; such calls go to NCCL: " + why);
      decision.reason = Reason::kJitFailed;
      return false;
    }
    plan = std::make_shared<const Plan>(Plan::parse(std::string_view(sent).substr(1), "JIT plan from rank 0"));
    comm.jit.plans.push_back({planInfoFrom(*plan), plan});
    logLine(LogLevel::kInfo, comm.cudaDevice,
            who + ": compiled plan '" + plan->name + "' for " + key + " on first use (JIT)");
  }
  decision.plan = plan;
  decision.messageBytes = request.messageBytes;
  decision.inplace = request.inplace;
  decision.route = Route::kLoom;
  decision.reason = Reason::kPlan;
  return true;
}

std::shared_ptr<const Plan> usePacketPlan(ncclComm& pair, uint64_t capacity) {
  JitPlans& jit = pair.jit;
  if (jit.packetPlan || jit.packetFailed) return jit.packetPlan;
  const std::vector<std::string> options = {
      "--collective",          "alltoallv", "--world-size", "2", "--ranks-per-node", "2", "--bytes", "0", "--packets",
      std::to_string(capacity)};
  const std::string sent = fromRankZero(pair, "send/recv packets of up to " + std::to_string(capacity) + " bytes",
                                        pair.rank == 0 ? runJitPlan(pair, options) : std::string());
  const std::string who = "rank " + std::to_string(pair.rank) + "/2";
  if (sent.empty() || sent[0] != 'P') {
    jit.packetFailed = true;
    logLine(LogLevel::kWarn, pair.cudaDevice,
            who + ": the packet plan for send/recv of up to " + std::to_string(capacity) +
                " bytes (LOOM_P2P_PACKET_BYTES) could not be compiled; such rounds run the pair's other plan: " +
                (sent.empty() ? "rank 0 sent nothing" : sent.substr(1)));
    return nullptr;
  }
  jit.packetPlan = std::make_shared<const Plan>(Plan::parse(std::string_view(sent).substr(1), "JIT plan from rank 0"));
  logLine(LogLevel::kInfo, pair.cudaDevice,
          who + ": compiled plan '" + jit.packetPlan->name + "' for send/recv of up to " + std::to_string(capacity) +
              " bytes (LOOM_P2P_PACKET_BYTES)");
  return jit.packetPlan;
}

}  // namespace loom::nccl
