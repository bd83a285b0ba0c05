/* xrt-dev — the xrt backend's entry points for the rest of the engine: the
 * registry's constructor (engine/device/device.c) and the probe's runner, which
 * tests drive on any device. The daemon's side is engine/xrt.h. */
#ifndef MINICPMD_ENGINE_DEVICE_XRT_DEV_H
#define MINICPMD_ENGINE_DEVICE_XRT_DEV_H

#include <stddef.h>
#include <stdio.h>

#include "engine/device/device.h"
#include "engine/xrt.h"

/* Registry entry (device.c, when built). */
int eng__device_xrt_open(const struct eng_device_opts *o, struct eng_device **out, char *err,
                         size_t errlen);

/* --npu-probe: load the pack at pack_dir on `dev` (an opened xrt device, or any
 * device in tests), decode a few tokens with K = all, 24, 21, 16, 8, 4, 2, 1, print a
 * report to out, and save the fastest K that completed every step in
 * state_dir/runlist-k.json (when state_dir is set). Returns 0 when some K worked,
 * 1 otherwise (err says why when nothing ran at all). */
int eng_xrt_probe_run(struct eng_device *dev, const char *pack_dir, const char *state_dir,
                      int steps, FILE *out, char *err, size_t errlen);

#endif
