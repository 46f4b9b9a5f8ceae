#pragma once

// A thread kept for one communicator, for the calls of several communicators of one process that a
// group runs together (ncclCommInitAll, nccl-tests -g N, CuPy): each communicator's calls run on its own
// thread, side by side, because a call may wait for its peers at set-up and the peers are the other
// communicators of this thread. Kept for the communicator's life, so a group costs a hand-over and no
// thread start.

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace loom::nccl {

class CommWorker {
 public:
  CommWorker();
  ~CommWorker();  // finishes the task in hand, then joins
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  // Hands `task` to the thread (one at a time: after the previous one's finish()).
  void start(std::function<void()> task);
  // Waits for the task started last; rethrows what it threw.
  void finish();

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> task_;
  bool busy_ = false;
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace loom::nccl
