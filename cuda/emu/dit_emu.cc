// cuda/dit.cu as host C++ under cuda/kernel.h's emulation: the backend of --device
// cuda-emulated, in libtidal in every build.
#define TDL_CUDA_EMULATE 1
#include "cuda/dit.cu"
