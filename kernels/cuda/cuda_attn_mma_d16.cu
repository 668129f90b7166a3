// kernels/cuda/cuda_attn_mma_d16.cu — tensor-core attention kernels for head_dim 16
// (one translation unit per head dimension so nvcc builds them in parallel).
#include "kernels/cuda/cuda_attn_mma.cuh"
NSA_INSTANTIATE_MMA(16)
