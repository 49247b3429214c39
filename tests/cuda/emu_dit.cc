// cuda/dit.cu compiled as host C++ under cuda/kernel.h's emulation (tests/unit/test_dit_emu.c).
#define TDL_CUDA_EMULATE 1
#include "cuda/dit.cu"
