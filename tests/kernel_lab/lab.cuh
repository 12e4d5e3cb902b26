// Shared by the kernel labs: error checks and cold-L2 timing (see run.sh).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

constexpr size_t kFlushBytes = size_t{256} << 20;

// Median GPU time (us) of `run(stream)` over `reps` calls, each after a 256 MB memset of `flush` (cold L2), timed by
// CUDA events around the call alone.
template <typename F> float median_us(F&& run, void* flush, int reps, cudaStream_t stream) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaMemsetAsync(flush, i & 0xff, kFlushBytes, stream));
    CK(cudaEventRecord(e0, stream));
    run(stream);
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1e3f);
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The same for `launch()` on the default stream, after three warm-up calls.
template <typename F> float time_us(F&& launch, void* flush, int reps = 40) {
  for (int i = 0; i < 3; ++i) launch();
  return median_us([&](cudaStream_t) { launch(); }, flush, reps, 0);
}

// The same for one launch captured in a CUDA graph, timed around its replay: the benchmarks' "GPU time: cuda graph"
// (benchmarks/timing.py), which decides the decode-size targets. `launch` takes the stream to launch on.
template <typename F> float time_graph_us(F&& launch, void* flush, int reps = 50) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < 3; ++i) launch(s);
  CK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launch(s);
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  const float us = median_us([&](cudaStream_t stream) { CK(cudaGraphLaunch(exec, stream)); }, flush, reps, s);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(s));
  return us;
}

// A bf16 value given as its 16 bits, on the host.
inline float host_bf(uint16_t bits) {
  const uint32_t w = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
