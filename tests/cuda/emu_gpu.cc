// cuda/gpu.cu compiled as host C++ under cuda/kernel.h's emulation, for the CPU tests of the
// GPU kernels (tests/cuda/*_emu.c).
#define TDL_CUDA_EMULATE 1
#include "cuda/gpu.cu"
