// Conformance double of XRT's <xrt/experimental/xrt_xclbin.h> (see xrt/detail/double.h for what it
// stands for, and the XRT versions whose signatures it copies).
#ifndef MINICPMD_XRT_DOUBLE_EXPERIMENTAL_XRT_XCLBIN_H
#define MINICPMD_XRT_DOUBLE_EXPERIMENTAL_XRT_XCLBIN_H
#include "xrt/detail/double.h"
#endif
