#include "comm_worker.hpp"

#include <utility>

namespace loom::nccl {

CommWorker::CommWorker() : thread_([this] { run(); }) {}

CommWorker::~CommWorker() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !busy_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void CommWorker::start(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    task_ = std::move(task);
    failure_ = nullptr;
    busy_ = true;
  }
  changed_.notify_all();
}

void CommWorker::finish() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !busy_; });
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void CommWorker::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return busy_ || stopping_; });
    if (!busy_) return;  // stopping, nothing in hand
    std::function<void()> task = std::move(task_);
    lock.unlock();
    std::exception_ptr failure;
    try {
      task();
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    failure_ = failure;
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace loom::nccl
