// cuda/mxfp.cu compiled as host C++ under cuda/kernel.h's emulation, for its CPU test
// (tests/unit/test_mxfp_emu.c).
#define TDL_CUDA_EMULATE 1
#include "cuda/mxfp.cu"
