// Conformance double of XRT's <xrt/experimental/xrt_ext.h> (see xrt/detail/double.h for what it
// stands for, and the XRT versions whose signatures it copies).
#ifndef MINICPMD_XRT_DOUBLE_EXPERIMENTAL_XRT_EXT_H
#define MINICPMD_XRT_DOUBLE_EXPERIMENTAL_XRT_EXT_H
#include "xrt/detail/double.h"
#endif
