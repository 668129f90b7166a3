// kernels/cuda/cuda_attn_mma_d64.cu — tensor-core attention kernels for head_dim 64
// (one translation unit per head dimension so nvcc builds them in parallel).
#include "kernels/cuda/cuda_attn_mma.cuh"
NSA_INSTANTIATE_MMA(64)
