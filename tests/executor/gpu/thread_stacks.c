// Preloaded into a test program (LD_PRELOAD, or compiled into a shim such as ../../nccl/gpu/one_gpu_devices.c):
// a crash (SIGSEGV, SIGBUS) prints its stack, each frame as library+offset, before the signal takes the process
// down as it would have, and SIGUSR2 prints every thread's stack (each thread prints its own on SIGUSR1):
// where the threads of a stalled run wait, with ranks sharing one GPU. The tests turn the offsets into
// source lines with addr2line. For debugging only: backtrace() in a handler is not async-signal-safe.
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

// The calling thread's stack after `header`, each frame as library+offset (and its symbol where exported).
static void print_frames(const char* header, long number) {
  void* frames[64];
  const int count = backtrace(frames, 64);
  dprintf(STDERR_FILENO, header, number);
  for (int i = 0; i < count; ++i) {
    Dl_info info;
    if (dladdr(frames[i], &info) && info.dli_fname != NULL) {
      const uintptr_t offset = (uintptr_t)frames[i] - (uintptr_t)info.dli_fbase;
      dprintf(STDERR_FILENO, "  frame %d: %s+0x%lx (%s)\n", i, info.dli_fname, (unsigned long)offset,
              info.dli_sname != NULL ? info.dli_sname : "?");
    } else {
      dprintf(STDERR_FILENO, "  frame %d: %p\n", i, frames[i]);
    }
  }
}

static void print_stack(int signal_number) {
  print_frames("thread_stacks: signal %ld, stack:\n", signal_number);
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

static void print_own_stack(int signal_number) {
  (void)signal_number;
  print_frames("thread_stacks: thread %ld, stack:\n", (long)syscall(SYS_gettid));
}

static void print_every_stack(int signal_number) {
  (void)signal_number;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == NULL) return;
  const long self = (long)syscall(SYS_gettid);
  for (struct dirent* entry; (entry = readdir(tasks)) != NULL;) {
    const long thread = atol(entry->d_name);
    if (thread <= 0 || thread == self) continue;
    syscall(SYS_tgkill, getpid(), thread, SIGUSR1);
    usleep(50000);  // one thread's stack at a time
  }
  closedir(tasks);
  print_own_stack(0);
}

__attribute__((constructor)) static void install_crash_report(void) {
  signal(SIGSEGV, print_stack);
  signal(SIGBUS, print_stack);
  signal(SIGUSR1, print_own_stack);
  signal(SIGUSR2, print_every_stack);
}
