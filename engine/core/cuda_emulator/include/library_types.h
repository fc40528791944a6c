// cudaDataType of the CPU emulator (LOCKSTEP_CUDA=EMULATED), with the toolkit's values: the
// element types lockstep hands to cuBLAS (engine/core/cuda_emulator/cublas.cpp).
#pragma once

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
};
typedef cudaDataType_t cudaDataType;
