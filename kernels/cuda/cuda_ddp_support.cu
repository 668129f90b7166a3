// kernels/cuda/cuda_ddp_support.cu — what the data-parallel layer needs from the CUDA
// backend (trainer/comm_nccl.c, trainer/train.c; docs/ddp.md), as extern "C"
// functions so that C code can call them:
//   nsa_cuda_ddp_stream        the backend's one stream (NSA_STREAM): the NCCL
//                              transport's comm stream waits on events recorded on
//                              it, so bucket reductions overlap the rest of backward
//   nsa_cuda_ddp_device        the device the backend initialised (NSA_CUDA_DEVICE)
//   nsa_cuda_ddp_device_count  devices visible to this process (before the backend
//                              is initialised: the local rank picks one of them)
// A file of its own so that the backend's files stay untouched.
#include "kernels/cuda/cuda_common.cuh"

extern "C" void *nsa_cuda_ddp_stream(void) { return (void *)g_nsa_cuda.stream; }

extern "C" int nsa_cuda_ddp_device(void) { return g_nsa_cuda.device; }

extern "C" int nsa_cuda_ddp_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}
