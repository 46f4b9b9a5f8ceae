// A test shim, put in front of the shared CUDA runtime with LD_PRELOAD: it shows a program
// LOOM_VIRTUAL_GPUS devices (default 8) that are all GPU 0. nccl-tests gives each of its threads the
// next device index (`-t 4 -g 1` uses devices 0..3), so with this shim its threads become ranks sharing
// GPU 0 (LOOM_SHARE_GPU=1) on a machine with one GPU. Only the calls that take a device index are
// wrapped; cudaGetDevice answers the index the calling thread chose, as it would on a real machine.
// One more: cudaDeviceSynchronize waits for the legacy default stream (where nccl-tests prepares and
// checks its data) instead of the whole device. On a GPU of its own a thread's device-wide wait covers
// only its own work; on a shared one it would also wait for the other threads' collectives, which wait
// in turn for this thread's next call, and the job would stall until Loom's device timeout.
// And cudaFreeHost keeps the pinned block for the next cudaHostAlloc of its size (nccl-tests allocates and
// frees a few bytes per check): the real one waits for the whole device while holding a lock that every
// other thread's CUDA calls (a launch, an event record) wait for, so a rank whose peers' kernels wait for
// its next launch could not make it (seen with 8 ranks, 2026-11-29: docs/testing.md).
// Compiled with ../../executor/gpu/thread_stacks.c: a crash prints its stack, SIGUSR2 every thread's.
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>

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

// Pinned blocks freed by the program, kept for reuse (see the top of the file). The program frees a block
// only once its own work on it is done, so another cudaHostAlloc may take it at once.
enum { kKeptBlocks = 256 };
static struct {
  void* pointer;
  size_t bytes;
  unsigned int flags;
  int free;
} kept[kKeptBlocks];
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int flags) {
  pthread_mutex_lock(&kept_lock);
  for (int i = 0; i < kKeptBlocks; ++i) {
    if (kept[i].pointer != NULL && kept[i].free && kept[i].bytes == bytes && kept[i].flags == flags) {
      kept[i].free = 0;
      *pointer = kept[i].pointer;
      pthread_mutex_unlock(&kept_lock);
      return cudaSuccess;
    }
  }
  pthread_mutex_unlock(&kept_lock);
  cudaError_t (*real)(void**, size_t, unsigned int) = next_symbol(SYMBOL_NAME(cudaHostAlloc));
  const cudaError_t result = real(pointer, bytes, flags);
  if (result != cudaSuccess) return result;
  pthread_mutex_lock(&kept_lock);
  for (int i = 0; i < kKeptBlocks; ++i) {
    if (kept[i].pointer == NULL) {
      kept[i].pointer = *pointer;
      kept[i].bytes = bytes;
      kept[i].flags = flags;
      kept[i].free = 0;
      break;
    }
  }
  pthread_mutex_unlock(&kept_lock);
  return result;
}

cudaError_t cudaFreeHost(void* pointer) {
  pthread_mutex_lock(&kept_lock);
  for (int i = 0; i < kKeptBlocks; ++i) {
    if (pointer != NULL && kept[i].pointer == pointer) {
      kept[i].free = 1;
      pthread_mutex_unlock(&kept_lock);
      return cudaSuccess;
    }
  }
  pthread_mutex_unlock(&kept_lock);
  cudaError_t (*real)(void*) = next_symbol(SYMBOL_NAME(cudaFreeHost));
  return real(pointer);
}
