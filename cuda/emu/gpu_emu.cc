// cuda/gpu.cu as host C++ under cuda/kernel.h's emulation: part of libtidal in every build, for
// --device cuda-emulated (the GPU code path, tested without a GPU).
#define TDL_CUDA_EMULATE 1
#include "cuda/gpu.cu"
