// Conformance double of XRT's <xrt/xrt_kernel.h> (see xrt/detail/double.h for what it
// stands for, and the XRT versions whose signatures it copies).
#ifndef MINICPMD_XRT_DOUBLE_XRT_KERNEL_H
#define MINICPMD_XRT_DOUBLE_XRT_KERNEL_H
#include "xrt/detail/double.h"
#endif
