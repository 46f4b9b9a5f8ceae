// A test shim, put in front of the shared CUDA runtime with LD_PRELOAD: it shows a program
// LOOM_VIRTUAL_GPUS devices (default 8) that are all GPU 0. nccl-tests gives each of its threads the
// next device index (`-t 4 -g 1` uses devices 0..3), so with this shim its threads become ranks sharing
// GPU 0 (LOOM_SHARE_GPU=1) on a machine with one GPU. Only the calls that take a device index are
// wrapped; cudaGetDevice answers the index the calling thread chose, as it would on a real machine.
// One more: cudaDeviceSynchronize waits for the legacy default stream (where nccl-tests prepares and
// checks its data) instead of the whole device. On a GPU of its own a thread's device-wide wait covers
// only its own work; on a shared one it would also wait for the other threads' collectives, which wait
// in turn for this thread's next call, and the job would stall until Loom's device timeout.
// A crash (SIGSEGV, SIGBUS) prints its stack, each frame as library+offset, before the signal
// takes the process down as it would have: the test turns the offsets into source lines.
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static void print_stack(int signal_number) {
  void* frames[64];
  const int count = backtrace(frames, 64);
  dprintf(STDERR_FILENO, "one_gpu_devices: signal %d, stack:\n", signal_number);
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
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

// SIGUSR2 to the process prints every thread's stack (each thread prints its own on SIGUSR1): where the
// threads of a stalled run wait. For debugging only: backtrace() in a handler is not async-signal-safe.
static void print_own_stack(int signal_number) {
  (void)signal_number;
  void* frames[64];
  const int count = backtrace(frames, 64);
  dprintf(STDERR_FILENO, "one_gpu_devices: thread %ld, stack:\n", (long)syscall(SYS_gettid));
  for (int i = 0; i < count; ++i) {
    Dl_info info;
    if (dladdr(frames[i], &info) && info.dli_fname != NULL) {
      const uintptr_t offset = (uintptr_t)frames[i] - (uintptr_t)info.dli_fbase;
      dprintf(STDERR_FILENO, "  frame %d: %s+0x%lx (%s)\n", i, info.dli_fname, (unsigned long)offset,
              info.dli_sname != NULL ? info.dli_sname : "?");
    }
  }
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

static __thread int chosen_device = 0;

static int virtual_devices(void) {
  const char* text = getenv("LOOM_VIRTUAL_GPUS");
  const int count = text != NULL ? atoi(text) : 8;
  return count > 0 ? count : 8;
}

// The symbol's name after the header's renames (cudaGetDeviceProperties is cudaGetDeviceProperties_v2).
#define QUOTED(name) #name
#define SYMBOL_NAME(name) QUOTED(name)

static void* next_symbol(const char* name) {
  void* symbol = dlsym(RTLD_NEXT, name);
  if (symbol == NULL) abort();  // the shim sits in front of a CUDA runtime that has every one of these
  return symbol;
}

// The real device behind `device`: 0 for every index the shim shows, else the index itself, so that
// an index past them gets the runtime's own error.
static int real_device(int device) { return device >= 0 && device < virtual_devices() ? 0 : device; }

cudaError_t cudaGetDeviceCount(int* count) {
  cudaError_t (*real)(int*) = next_symbol(SYMBOL_NAME(cudaGetDeviceCount));
  const cudaError_t result = real(count);
  if (result == cudaSuccess && *count > 0) *count = virtual_devices();
  return result;
}

cudaError_t cudaSetDevice(int device) {
  cudaError_t (*real)(int) = next_symbol(SYMBOL_NAME(cudaSetDevice));
  const cudaError_t result = real(real_device(device));
  if (result == cudaSuccess) chosen_device = device;
  return result;
}

cudaError_t cudaGetDevice(int* device) {
  cudaError_t (*real)(int*) = next_symbol(SYMBOL_NAME(cudaGetDevice));
  const cudaError_t result = real(device);
  if (result == cudaSuccess) *device = chosen_device;
  return result;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attribute, int device) {
  cudaError_t (*real)(int*, enum cudaDeviceAttr, int) = next_symbol(SYMBOL_NAME(cudaDeviceGetAttribute));
  return real(value, attribute, real_device(device));
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* properties, int device) {
  cudaError_t (*real)(struct cudaDeviceProp*, int) = next_symbol(SYMBOL_NAME(cudaGetDeviceProperties));
  return real(properties, real_device(device));
}

cudaError_t cudaDeviceGetPCIBusId(char* busId, int length, int device) {
  cudaError_t (*real)(char*, int, int) = next_symbol(SYMBOL_NAME(cudaDeviceGetPCIBusId));
  return real(busId, length, real_device(device));
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccess, int device, int peer) {
  cudaError_t (*real)(int*, int, int) = next_symbol(SYMBOL_NAME(cudaDeviceCanAccessPeer));
  return real(canAccess, real_device(device), real_device(peer));
}

cudaError_t cudaDeviceSynchronize(void) {
  cudaError_t (*real)(cudaStream_t) = next_symbol(SYMBOL_NAME(cudaStreamSynchronize));
  return real(cudaStreamLegacy);
}
