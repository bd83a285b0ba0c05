/* Internal to engine/device/xrt/: the settings the backend reads (xrt-common.c keeps them). */
#ifndef MINICPMD_ENGINE_XRT_IMPL_H
#define MINICPMD_ENGINE_XRT_IMPL_H

#include "engine/device/xrt/xrt-dev.h"

/* The configured settings with defaults filled in (never NULL strings but
 * kernels_dir, which stays NULL when not given). */
const struct eng_xrt_config *eng__xrt_config(void);

/* --npu-probe's single-run row: while set, every xrt device submits one run per
 * dispatch whatever its mode. */
void eng__xrt_force_single(bool on);
bool eng__xrt_forced_single(void);

/* The conformance build compiles dev-xrt.c against the double under another name. */
#ifdef MINICPMD_XRT_DOUBLE
#define eng__device_xrt_open eng__device_xrt_double_open
int eng__device_xrt_double_open(const struct eng_device_opts *o, struct eng_device **out,
                                char *err, size_t errlen);
#endif

#endif
