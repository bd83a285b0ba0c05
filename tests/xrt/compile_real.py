"""The XRT bridge compiled against the real XRT public headers (compile only).

Usage: compile_real.py INCLUDE SRCROOT BUILDROOT CXX... -- CC... -- DEFINES...

bridge.cpp is the only file that includes XRT; dev-xrt.c is the rest of what
-Dxrt builds. Both are compiled as a real XRT build compiles them (no
-DMINICPMD_XRT_DOUBLE, the -D flags meson's checks found in these headers), with
-Wall -Wextra -Werror and -fsyntax-only: the headers come with no library, so
nothing is linked. Exit 77 (skipped) only when the header tree is not there.
"""
import os
import subprocess
import sys


def main():
    inc, src, build = sys.argv[1:4]
    rest = sys.argv[4:]
    cut = rest.index('--')
    cxx = rest[:cut]
    rest = rest[cut + 1:]
    cut = rest.index('--')
    cc, defines = rest[:cut], rest[cut + 1:]
    if not os.path.isdir(os.path.join(inc, 'xrt')):
        print(f'SKIP: no XRT headers at {inc} (../shared/vendor/xrt-2.26 beside the repo)')
        return 77
    if not defines:
        print(f'FAIL: meson found no xrt::runlist::state() in {inc}: see meson-log.txt')
        return 1
    common = ['-Wall', '-Wextra', '-Werror', '-fsyntax-only', '-I', src, '-I', build]
    jobs = [
        cxx + ['-std=c++17', '-I', inc] + common + defines
        + [os.path.join(src, 'engine/device/xrt/bridge.cpp')],
        cc + ['-std=c11', '-D_GNU_SOURCE'] + common
        + [os.path.join(src, 'engine/device/xrt/dev-xrt.c')],
    ]
    failed = 0
    for cmd in jobs:
        print(' '.join(cmd), flush=True)
        if subprocess.run(cmd).returncode != 0:
            failed += 1
    print(f'{len(jobs) - failed} of {len(jobs)} compiled cleanly against {inc}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
